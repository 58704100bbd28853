# Imports llama.cpp (libllama + libggml) from the prefix scripts/setup-llama.sh builds, as the
# target llama::llama. Only src/llama links it (kvc_llama, and the tests' byte-fallback model):
# with scripts/check_deps.sh (the deps.graph test), that is how the "only llama/ includes
# llama.cpp headers" rule is enforced.
find_path(LLAMA_INCLUDE_DIR llama.h HINTS "${KVCODEC_LLAMA_ROOT}/include" REQUIRED NO_DEFAULT_PATH)
find_library(LLAMA_LIBRARY llama HINTS "${KVCODEC_LLAMA_ROOT}/lib" REQUIRED NO_DEFAULT_PATH)
find_library(GGML_LIBRARY ggml HINTS "${KVCODEC_LLAMA_ROOT}/lib" REQUIRED NO_DEFAULT_PATH)
find_library(GGML_BASE_LIBRARY ggml-base HINTS "${KVCODEC_LLAMA_ROOT}/lib" REQUIRED NO_DEFAULT_PATH)
add_library(llama::llama INTERFACE IMPORTED)
target_include_directories(llama::llama SYSTEM INTERFACE "${LLAMA_INCLUDE_DIR}")
target_link_libraries(llama::llama INTERFACE "${LLAMA_LIBRARY}" "${GGML_LIBRARY}" "${GGML_BASE_LIBRARY}")
message(STATUS "llama.cpp: ${LLAMA_LIBRARY}")
