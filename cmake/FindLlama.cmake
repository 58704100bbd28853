# Imports llama.cpp (libllama + libggml) as the target llama::llama. Only src/llama links it
# (kvc_llama, and the tests' byte-fallback model): with scripts/check_deps.sh (the deps.graph
# test), that is how the "only llama/ includes llama.cpp headers" rule is enforced.
#
# Where from, in order:
# - KVCODEC_LLAMA_ROOT set: the prefix scripts/setup-llama.sh builds from node-llama-cpp's bundled
#   source (what scripts/setup.sh passes). Its libraries are installed beside libkvcodec
#   (KVCODEC_LLAMA_BUNDLED), since no package provides them.
# - otherwise an installed llama.cpp: its CMake package (find_package(llama), target `llama`),
#   or llama.h and the libraries on the default search paths (CMAKE_PREFIX_PATH, /usr/local, ...).
set(KVCODEC_LLAMA_BUNDLED OFF)
if(KVCODEC_LLAMA_ROOT)
  find_path(LLAMA_INCLUDE_DIR llama.h HINTS "${KVCODEC_LLAMA_ROOT}/include" REQUIRED NO_DEFAULT_PATH)
  find_library(LLAMA_LIBRARY llama HINTS "${KVCODEC_LLAMA_ROOT}/lib" REQUIRED NO_DEFAULT_PATH)
  find_library(GGML_LIBRARY ggml HINTS "${KVCODEC_LLAMA_ROOT}/lib" REQUIRED NO_DEFAULT_PATH)
  find_library(GGML_BASE_LIBRARY ggml-base HINTS "${KVCODEC_LLAMA_ROOT}/lib" REQUIRED NO_DEFAULT_PATH)
  set(KVCODEC_LLAMA_BUNDLED ON)
  message(STATUS "llama.cpp: ${LLAMA_LIBRARY} (bundled build)")
else()
  find_package(llama CONFIG QUIET)
  if(TARGET llama)
    add_library(llama::llama INTERFACE IMPORTED)
    target_link_libraries(llama::llama INTERFACE llama)
    message(STATUS "llama.cpp: installed package ${llama_DIR}")
    return()
  endif()
  find_path(LLAMA_INCLUDE_DIR llama.h)
  find_library(LLAMA_LIBRARY llama)
  find_library(GGML_LIBRARY ggml)
  find_library(GGML_BASE_LIBRARY ggml-base)
  if(NOT LLAMA_INCLUDE_DIR OR NOT LLAMA_LIBRARY OR NOT GGML_LIBRARY OR NOT GGML_BASE_LIBRARY)
    message(FATAL_ERROR "llama.cpp not found: install it (its CMake package or headers and libraries), or set "
                        "KVCODEC_LLAMA_ROOT to the prefix scripts/setup-llama.sh prints (scripts/setup.sh does that)")
  endif()
  message(STATUS "llama.cpp: ${LLAMA_LIBRARY} (installed)")
endif()
add_library(llama::llama INTERFACE IMPORTED)
target_include_directories(llama::llama SYSTEM INTERFACE "${LLAMA_INCLUDE_DIR}")
target_link_libraries(llama::llama INTERFACE "${LLAMA_LIBRARY}" "${GGML_LIBRARY}" "${GGML_BASE_LIBRARY}")
