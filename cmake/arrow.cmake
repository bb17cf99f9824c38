# Apache Arrow's C++ library (Arrow and Parquet), for Hugging Face datasets on disk: Parquet files
# and the Arrow IPC files of datasets.save_to_disk (docs/DATA.md#hf-datasets). It is used by one
# shared module, libgemmax_arrow.so, which the binary loads only when it reads such a file, so
# the binary itself starts without Arrow's libraries.
#
# Debian 12 does not package Arrow. Its headers and shared libraries come from the pyarrow wheel,
# by pinned version and SHA256 (as CUTLASS's do), or from an installed Arrow:
#   -DGEMMAX_ARROW_ROOT=<prefix holding include/arrow/api.h and lib/libarrow.so, libparquet.so>
#   -DGEMMAX_ARROW=OFF: no module; reading Parquet or Arrow files then names this option.
option(GEMMAX_ARROW "Build libgemmax_arrow.so, the Parquet/Arrow reader (fetches pyarrow's libs)" ON)
set(GEMMAX_ARROW_ROOT "" CACHE PATH "An installed Arrow C++ (include/, lib/); empty: the pinned wheel")
set(GEMMAX_ARROW_VERSION 18.1.0)
set(GEMMAX_ARROW_SO 1801)  # the wheel's library suffix: libarrow.so.1801
set(GEMMAX_ARROW_WHEEL_URL "https://files.pythonhosted.org/packages/8c/64/5099cdb325828722ef7ffeba9a4696f238eb0cdeae227f831c2d77fcf1bd/pyarrow-18.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
set(GEMMAX_ARROW_WHEEL_SHA256 e31e9417ba9c42627574bdbfeada7217ad8a4cbbe45b9d6bdd4b62abbca4c6f6)
# Where the wheel is unpacked (the fuzz build shares the main build's), and the module is put.
set(GEMMAX_ARROW_DEPS_DIR "${CMAKE_BINARY_DIR}/_deps" CACHE PATH "Where the pyarrow wheel is unpacked")
if(NOT GEMMAX_ARROW_MODULE_DIR)
  set(GEMMAX_ARROW_MODULE_DIR ${CMAKE_BINARY_DIR}/bin)
endif()

get_filename_component(GEMMAX_ARROW_SRC "${CMAKE_CURRENT_LIST_DIR}/../src" ABSOLUTE)
set(GEMMAX_HAVE_ARROW FALSE)
set(GEMMAX_ARROW_HINT "Parquet and Arrow IPC files cannot be read (the build says how to get them)")
if(GEMMAX_ARROW AND GEMMAX_ARROW_ROOT)
  find_path(GEMMAX_ARROW_INCLUDE arrow/api.h PATHS ${GEMMAX_ARROW_ROOT}/include NO_DEFAULT_PATH)
  find_library(GEMMAX_ARROW_LIB arrow PATHS ${GEMMAX_ARROW_ROOT}/lib ${GEMMAX_ARROW_ROOT}/lib64
               NO_DEFAULT_PATH)
  find_library(GEMMAX_PARQUET_LIB parquet PATHS ${GEMMAX_ARROW_ROOT}/lib ${GEMMAX_ARROW_ROOT}/lib64
               NO_DEFAULT_PATH)
  if(NOT GEMMAX_ARROW_INCLUDE OR NOT GEMMAX_ARROW_LIB OR NOT GEMMAX_PARQUET_LIB)
    message(FATAL_ERROR "GEMMAX_ARROW_ROOT=${GEMMAX_ARROW_ROOT} holds no include/arrow/api.h, "
                        "lib/libarrow.so and lib/libparquet.so: name an installed Arrow C++")
  endif()
  set(GEMMAX_ARROW_CXX11_ABI 1)  # an installed library is built with the compiler's default
  set(GEMMAX_HAVE_ARROW TRUE)
elseif(GEMMAX_ARROW)
  set(root "${GEMMAX_ARROW_DEPS_DIR}/pyarrow-${GEMMAX_ARROW_VERSION}")
  set(libs "${root}/pyarrow/libarrow.so.${GEMMAX_ARROW_SO}" "${root}/pyarrow/libparquet.so.${GEMMAX_ARROW_SO}")
  if(NOT EXISTS "${root}/pyarrow/include/arrow/api.h" OR NOT EXISTS "${root}/pyarrow/libparquet.so.${GEMMAX_ARROW_SO}")
    set(wheel "${root}.whl")
    message(STATUS "gemmax: fetching pyarrow ${GEMMAX_ARROW_VERSION} (Arrow's C++ headers and libraries)")
    file(DOWNLOAD "${GEMMAX_ARROW_WHEEL_URL}" "${wheel}" TIMEOUT 120 STATUS got)
    list(GET got 0 code)
    if(code EQUAL 0)
      file(SHA256 "${wheel}" sha)
      if(NOT sha STREQUAL GEMMAX_ARROW_WHEEL_SHA256)
        file(REMOVE "${wheel}")
        message(FATAL_ERROR "the pyarrow wheel from ${GEMMAX_ARROW_WHEEL_URL} has SHA256 ${sha}, "
                            "expected ${GEMMAX_ARROW_WHEEL_SHA256}")
      endif()
      file(ARCHIVE_EXTRACT INPUT "${wheel}" DESTINATION "${root}" PATTERNS "pyarrow/include/*"
           "pyarrow/libarrow.so.${GEMMAX_ARROW_SO}" "pyarrow/libparquet.so.${GEMMAX_ARROW_SO}")
    endif()
    file(REMOVE "${wheel}")
  endif()
  if(EXISTS "${root}/pyarrow/include/arrow/api.h" AND EXISTS "${root}/pyarrow/libparquet.so.${GEMMAX_ARROW_SO}")
    # The module's libraries live in lib/ beside bin/, where its RPATH looks.
    file(MAKE_DIRECTORY ${GEMMAX_ARROW_MODULE_DIR}/../lib)
    file(COPY ${libs} DESTINATION ${GEMMAX_ARROW_MODULE_DIR}/../lib)
    set(GEMMAX_ARROW_INCLUDE "${root}/pyarrow/include")
    set(GEMMAX_ARROW_LIB "${GEMMAX_ARROW_MODULE_DIR}/../lib/libarrow.so.${GEMMAX_ARROW_SO}")
    set(GEMMAX_PARQUET_LIB "${GEMMAX_ARROW_MODULE_DIR}/../lib/libparquet.so.${GEMMAX_ARROW_SO}")
    set(GEMMAX_ARROW_CXX11_ABI 0)  # manylinux2014 wheels use the old std::string ABI
    set(GEMMAX_HAVE_ARROW TRUE)
  else()
    message(WARNING "gemmax: could not fetch pyarrow ${GEMMAX_ARROW_VERSION} (${got}): "
                    "${GEMMAX_ARROW_HINT}. Offline: -DGEMMAX_ARROW_ROOT=<installed Arrow C++>")
  endif()
endif()

if(GEMMAX_HAVE_ARROW)
  add_library(gemmax_arrow MODULE ${GEMMAX_ARROW_SRC}/gemmax/data/arrow_module.cc)
  target_include_directories(gemmax_arrow PRIVATE ${GEMMAX_ARROW_SRC})
  target_include_directories(gemmax_arrow SYSTEM PRIVATE ${GEMMAX_ARROW_INCLUDE})
  target_compile_definitions(gemmax_arrow PRIVATE _GLIBCXX_USE_CXX11_ABI=${GEMMAX_ARROW_CXX11_ABI})
  # Only gemmax_arrow_api is exported: nothing of Arrow's ABI meets the binary's.
  target_compile_options(gemmax_arrow PRIVATE -Wall -Wextra -fvisibility=hidden
                         -fvisibility-inlines-hidden)
  target_link_libraries(gemmax_arrow PRIVATE nlohmann_json::nlohmann_json ${GEMMAX_PARQUET_LIB}
                        ${GEMMAX_ARROW_LIB})
  set_target_properties(gemmax_arrow PROPERTIES PREFIX "lib" LIBRARY_OUTPUT_DIRECTORY
                        ${GEMMAX_ARROW_MODULE_DIR} BUILD_RPATH "\$ORIGIN/../lib;\$ORIGIN/lib;\$ORIGIN"
                        INSTALL_RPATH "\$ORIGIN/../lib;\$ORIGIN")
  # The reader of the binary's side loads the module (arrow_reader.cc).
  set_source_files_properties(${GEMMAX_ARROW_SRC}/gemmax/data/arrow_reader.cc PROPERTIES
                              COMPILE_DEFINITIONS GEMMAX_ARROW_MODULE_BUILT=1)
  message(STATUS "gemmax: Parquet/Arrow reader libgemmax_arrow.so (Arrow ${GEMMAX_ARROW_VERSION} "
                 "headers at ${GEMMAX_ARROW_INCLUDE})")
else()
  message(STATUS "gemmax: no Arrow C++: ${GEMMAX_ARROW_HINT}")
endif()
