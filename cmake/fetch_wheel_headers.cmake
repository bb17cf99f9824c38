# gemmax_wheel_headers(<VAR> NAME <label> VERSION <v> URL <url> SHA256 <hash> INCLUDE <dir in
#                      the wheel> CHECK <file under it> DIR <offline include dir, may be empty>
#                      FETCH <ON|OFF> HINT <what is left out without it>)
#
# Header-only GPU libraries that ship in PyPI wheels are build dependencies of the cuda backend,
# taken by pinned version: DIR when given (an unpacked include directory, for a machine without
# network; it must hold CHECK), else the wheel at URL, checked against SHA256 and unpacked into
# the build tree once. Nothing is fetched at run time. Sets VAR to the include directory, or to ""
# when the headers cannot be had: the build goes on without what needs them, and says so.
function(gemmax_wheel_headers var)
  cmake_parse_arguments(W "" "NAME;VERSION;URL;SHA256;INCLUDE;CHECK;DIR;FETCH;HINT" "" ${ARGN})
  set(${var} "" PARENT_SCOPE)
  if(W_DIR)
    if(NOT EXISTS "${W_DIR}/${W_CHECK}")
      message(FATAL_ERROR "${W_NAME}: ${W_DIR} holds no ${W_CHECK}: name the include directory "
                          "of an unpacked ${W_NAME} ${W_VERSION} (the wheel's ${W_INCLUDE})")
    endif()
    set(${var} "${W_DIR}" PARENT_SCOPE)
    return()
  endif()
  if(NOT W_FETCH)
    message(STATUS "gemmax: ${W_NAME} not fetched (fetch off): ${W_HINT}")
    return()
  endif()
  set(root "${CMAKE_BINARY_DIR}/_deps/${W_NAME}-${W_VERSION}")
  if(NOT EXISTS "${root}/${W_INCLUDE}/${W_CHECK}")
    set(wheel "${root}.whl")
    message(STATUS "gemmax: fetching ${W_NAME} ${W_VERSION}")
    file(DOWNLOAD "${W_URL}" "${wheel}" TIMEOUT 120 STATUS got)
    list(GET got 0 code)
    if(NOT code EQUAL 0)
      file(REMOVE "${wheel}")
      message(WARNING "gemmax: could not fetch ${W_NAME} ${W_VERSION} (${got}): ${W_HINT}")
      return()
    endif()
    file(SHA256 "${wheel}" sha)
    if(NOT sha STREQUAL W_SHA256)
      file(REMOVE "${wheel}")
      message(FATAL_ERROR "the ${W_NAME} wheel from ${W_URL} has SHA256 ${sha}, expected "
                          "${W_SHA256}")
    endif()
    file(ARCHIVE_EXTRACT INPUT "${wheel}" DESTINATION "${root}" PATTERNS "${W_INCLUDE}/*")
    file(REMOVE "${wheel}")
  endif()
  if(EXISTS "${root}/${W_INCLUDE}/${W_CHECK}")
    set(${var} "${root}/${W_INCLUDE}" PARENT_SCOPE)
  endif()
endfunction()
