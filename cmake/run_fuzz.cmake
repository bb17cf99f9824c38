# Runs one libFuzzer target for a bounded time (ctest's fuzz.<target> entries).
#   cmake -DFUZZER=exe -DCORPUS=seed_dir -DWORK=dir -DARTIFACTS=dir -DSECONDS=n -P run_fuzz.cmake
# New inputs go to WORK (emptied first), never into the committed seed corpus; a crashing input
# is saved in ARTIFACTS and the test fails, printing the report.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK} ${ARTIFACTS})
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=25 -rss_limit_mb=2560
          -print_final_stats=1 -artifact_prefix=${ARTIFACTS}/ ${WORK} ${CORPUS}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" runs "${out}")
string(REGEX MATCH "stat::new_units_added: *[0-9]+" added "${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); the input is in ${ARTIFACTS}:\n${out}")
endif()
get_filename_component(name ${FUZZER} NAME)
message("${name}: ${runs} in ${SECONDS} s | ${added}")
