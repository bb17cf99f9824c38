# cmake -DOUT=<header> -DROOT=<src/gemmax> -P module_interface.cmake
#
# Writes GEMMAX_MODULE_INTERFACE, a hash of the headers that the gemmax binary and its cuda
# module (libgemmax_cuda.so) share: the binary refuses a module whose hash differs, since the
# two would disagree on a class's layout or a virtual function's slot. Rewritten only when the
# hash changes, so that an edit elsewhere rebuilds nothing.
file(GLOB headers ${ROOT}/base/*.h ${ROOT}/backend/*.h ${ROOT}/backend/cuda/module_api.h
     ${ROOT}/parallel/comm.h ${ROOT}/parallel/comm_mpi.h ${ROOT}/parallel/comm_nccl.h ${ROOT}/parallel/collective_watchdog.h)
list(SORT headers)
set(all "")
foreach(h ${headers})
  file(SHA256 ${h} one)
  string(APPEND all "${one}")
endforeach()
string(SHA256 hash "${all}")
string(SUBSTRING "${hash}" 0 16 hash)
set(text "// Made by cmake/module_interface.cmake: the hash of the headers the binary and its\n// cuda module share.\n#pragma once\n#define GEMMAX_MODULE_INTERFACE \"${hash}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE ${OUT} "${text}")
