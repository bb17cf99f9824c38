# cmake -DBINARY=<gemmax_tests> -DOUT=<file> -P tests/layer_labels.cmake
#
# Writes OUT, a ctest script that gives every test of BINARY the label of its layer: the folder
# under tests/ of the file the test is defined in, as gtest's listing names it. One binary holds
# every layer's tests (one link instead of ten), so its tests are labelled by file, not by binary.
# A suite whose tests sit in two layers is an error here, since ctest names carry only the suite.
execute_process(COMMAND ${BINARY} --gtest_list_tests --gtest_output=json:${OUT}.json
                OUTPUT_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests failed (${rc})")
endif()
file(READ ${OUT}.json listing)

set(suites "")
set(layers "")
string(JSON n_suites LENGTH "${listing}" testsuites)
math(EXPR last_suite "${n_suites} - 1")
foreach(i RANGE ${last_suite})
  # One suite's text at a time: each GET parses its argument whole.
  string(JSON suite GET "${listing}" testsuites ${i})
  string(JSON name GET "${suite}" name)
  string(JSON n_tests LENGTH "${suite}" testsuite)
  math(EXPR last_test "${n_tests} - 1")
  set(layer "")
  foreach(j RANGE ${last_test})
    string(JSON file GET "${suite}" testsuite ${j} file)
    # The path may be absolute or relative to the build folder: the layer follows the last tests/.
    string(FIND "${file}" "tests/" at REVERSE)
    set(this "")
    if(NOT at EQUAL -1)
      math(EXPR at "${at} + 6")
      string(SUBSTRING "${file}" ${at} -1 below)
      if(below MATCHES "^([^/]+)/")
        set(this ${CMAKE_MATCH_1})
      endif()
    endif()
    if(this STREQUAL "")
      message(FATAL_ERROR "${name}: ${file} is in no layer's folder under tests/")
    elseif(layer STREQUAL "")
      set(layer ${this})
    elseif(NOT layer STREQUAL this)
      message(FATAL_ERROR "suite ${name} has tests in tests/${layer}/ and tests/${this}/: "
                          "give each layer's tests a suite of their own")
    endif()
  endforeach()
  list(APPEND suites "${name}")
  list(APPEND layers ${layer})
endforeach()
file(REMOVE ${OUT}.json)

# The script: gtest_discover_tests' include file (run before this one) lists the tests it added
# in gemmax_tests_TESTS, named <suite>.<test>.
file(WRITE ${OUT} "set(gemmax_suites [==[${suites}]==])\nset(gemmax_layers [==[${layers}]==])\n")
file(APPEND ${OUT} [==[
set(gemmax_labelled "")
foreach(gemmax_test IN LISTS gemmax_tests_TESTS)
  string(REGEX REPLACE "\\..*" "" gemmax_suite "${gemmax_test}")
  list(FIND gemmax_suites "${gemmax_suite}" gemmax_at)
  if(gemmax_at EQUAL -1)
    message(WARNING "${gemmax_test}: no layer label (build gemmax_tests again)")
    continue()
  endif()
  list(GET gemmax_layers ${gemmax_at} gemmax_layer)
  list(APPEND "gemmax_tests_of_${gemmax_layer}" "${gemmax_test}")
  list(APPEND gemmax_labelled ${gemmax_layer})
endforeach()
list(REMOVE_DUPLICATES gemmax_labelled)
foreach(gemmax_layer IN LISTS gemmax_labelled)
  set_tests_properties(${gemmax_tests_of_${gemmax_layer}} PROPERTIES LABELS ${gemmax_layer})
endforeach()
]==])
