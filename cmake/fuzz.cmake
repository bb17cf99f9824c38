# The fuzz targets (fuzz/) as part of the main build and test run: with GEMMAX_FUZZ=ON (the
# default) and clang installed, `cmake --build` also builds fuzz/ with clang, AddressSanitizer
# and UndefinedBehaviorSanitizer in build/fuzz/, and ctest runs each target for
# GEMMAX_FUZZ_SECONDS over its seed corpus (fuzz.<target>). Without clang the entries are
# skipped with a warning.
set(GEMMAX_FUZZ_SECONDS 20 CACHE STRING "seconds ctest runs each fuzz target")
set(GEMMAX_FUZZ_TARGETS safetensors_fuzz token_shard_fuzz config_fuzz hf_config_fuzz
                        train_checkpoint_fuzz tokenizer_fuzz tokenizer_json_fuzz chat_template_fuzz
                        parquet_fuzz)
find_program(GEMMAX_CLANGXX NAMES clang++ clang++-14 PATHS /usr/bin NO_DEFAULT_PATH)
set(fuzz_dir ${CMAKE_BINARY_DIR}/fuzz)
if(GEMMAX_CLANGXX)
  include(ExternalProject)
  ExternalProject_Add(
    gemmax_fuzz
    SOURCE_DIR ${CMAKE_SOURCE_DIR}/fuzz
    BINARY_DIR ${fuzz_dir}
    CMAKE_ARGS -DCMAKE_CXX_COMPILER=${GEMMAX_CLANGXX} -DCMAKE_BUILD_TYPE=
               -DGEMMAX_ARROW=${GEMMAX_HAVE_ARROW} -DGEMMAX_ARROW_ROOT=${GEMMAX_ARROW_ROOT}
               -DGEMMAX_ARROW_DEPS_DIR=${GEMMAX_ARROW_DEPS_DIR}
    BUILD_ALWAYS ON  # fuzz/ compiles src/: let its own build decide what is out of date
    INSTALL_COMMAND "")
  foreach(t ${GEMMAX_FUZZ_TARGETS})
    add_test(NAME fuzz.${t}
             COMMAND ${CMAKE_COMMAND} -DFUZZER=${fuzz_dir}/${t}
                     -DCORPUS=${CMAKE_SOURCE_DIR}/fuzz/corpus/${t} -DWORK=${fuzz_dir}/new_inputs/${t}
                     -DARTIFACTS=${fuzz_dir}/artifacts/${t} -DSECONDS=${GEMMAX_FUZZ_SECONDS}
                     -P ${CMAKE_SOURCE_DIR}/cmake/run_fuzz.cmake)
    set_tests_properties(fuzz.${t} PROPERTIES TIMEOUT 300)
  endforeach()
else()
  message(WARNING "No clang++ found: the fuzz targets will not be built and their tests are "
                  "skipped. Install Debian's clang and libclang-rt-dev (the README's test "
                  "command does), or configure with -DGEMMAX_FUZZ=OFF.")
  foreach(t ${GEMMAX_FUZZ_TARGETS})
    add_test(NAME fuzz.${t} COMMAND ${CMAKE_COMMAND} -E echo "skipped: no clang++")
    set_tests_properties(fuzz.${t} PROPERTIES SKIP_REGULAR_EXPRESSION "skipped:")
  endforeach()
endif()

# Each target's layer: its label for `ctest -L <layer>`, as the other tests have.
foreach(target_layer safetensors_fuzz:io token_shard_fuzz:data config_fuzz:config hf_config_fuzz:io
                     train_checkpoint_fuzz:checkpoint tokenizer_fuzz:data tokenizer_json_fuzz:data
                     chat_template_fuzz:data parquet_fuzz:data)
  string(REPLACE ":" ";" target_layer ${target_layer})
  list(GET target_layer 0 t)
  list(GET target_layer 1 layer)
  set_tests_properties(fuzz.${t} PROPERTIES LABELS ${layer})
endforeach()
