# cmake -DSOURCE=<repository root> -DWORK=<scratch folder> -P tests/tools/check_layers_test.cmake
#
# The layering check (cmake/check_layers.cmake) passes on the tree as it is, and fails, naming
# the file and both layers, on a copy with one upward include planted in it.
set(check ${SOURCE}/cmake/check_layers.cmake)
execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${SOURCE}/src -P ${check}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the check fails on the tree itself:\n${err}")
endif()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/gemmax/base ${WORK}/gemmax/model ${WORK}/gemmax/train)
file(WRITE ${WORK}/gemmax/train/trainer.h "#pragma once\n")
file(WRITE ${WORK}/gemmax/model/layer.cc "#include \"gemmax/base/tensor.h\"\n")
file(WRITE ${WORK}/gemmax/base/tensor.h "#pragma once\n#include \"gemmax/train/trainer.h\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -P ${check}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the check passed a base header that includes a train header")
endif()
string(FIND "${err}" "src/gemmax/base/tensor.h: includes gemmax/train/trainer.h: layer 'base' may not use layer 'train'" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the check failed without naming the file and the layers:\n${err}")
endif()
string(FIND "${err}" "model/layer.cc" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "the check blamed a file whose include points down:\n${err}")
endif()
