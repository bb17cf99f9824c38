# cmake -DROOT=<src folder holding gemmax/> [-DSTAMP=<file>] -P cmake/check_layers.cmake
#
# Fails, naming the file, the line and the layers, when a source file under ROOT/gemmax includes
# a gemmax header from a layer that its own layer may not use (cmake/layers.cmake). Run by the
# build before any library compiles, and by ctest on a tree with a planted upward include.
include(${CMAKE_CURRENT_LIST_DIR}/layers.cmake)

# The layer of a path relative to ROOT/gemmax: the layer with the longest matching folder.
function(gemmax_layer_of rel out)
  set(best "")
  set(best_len -1)
  foreach(layer ${GEMMAX_LAYERS})
    set(dir ${GEMMAX_LAYER_DIR_${layer}})
    string(LENGTH "${dir}" len)
    if(rel MATCHES "^${dir}[/.]" AND len GREATER best_len)
      set(best ${layer})
      set(best_len ${len})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE files RELATIVE ${ROOT}/gemmax ${ROOT}/gemmax/*.h ${ROOT}/gemmax/*.cc
     ${ROOT}/gemmax/*.cu ${ROOT}/gemmax/*.cuh)
set(problems "")
foreach(rel ${files})
  gemmax_layer_of(${rel} layer)
  if(NOT layer)
    string(APPEND problems "  src/gemmax/${rel}: in no layer; add its folder to cmake/layers.cmake\n")
    continue()
  endif()
  file(STRINGS ${ROOT}/gemmax/${rel} includes REGEX "^#include \"gemmax/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"gemmax/([^\"]+)\".*" "\\1" target "${line}")
    gemmax_layer_of(${target} used)
    if(used STREQUAL layer OR NOT used)
      continue()
    endif()
    list(FIND GEMMAX_LAYER_USES_${layer} ${used} allowed)
    if(allowed EQUAL -1)
      string(APPEND problems "  src/gemmax/${rel}: includes gemmax/${target}: layer '${layer}' "
             "may not use layer '${used}' (it may use: ${GEMMAX_LAYER_USES_${layer}})\n")
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "gemmax layering: an include points the wrong way (cmake/layers.cmake says "
                      "which layer may use which):\n${problems}Move the code to the layer that "
                      "may use both, or pass what it needs down through an interface.")
endif()
if(STAMP)
  file(TOUCH ${STAMP})
endif()
