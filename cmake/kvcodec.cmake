# Helpers that give every kvcodec target the same standard, warnings and sanitizers.

add_library(kvcodec_options INTERFACE)
target_compile_features(kvcodec_options INTERFACE cxx_std_20)
target_compile_options(kvcodec_options INTERFACE -Wall -Wextra -Wno-missing-field-initializers)
if(KVCODEC_SANITIZE)
  target_compile_options(kvcodec_options INTERFACE -fsanitize=${KVCODEC_SANITIZE} -fno-omit-frame-pointer
                                                   -fno-sanitize-recover=all)
  target_link_options(kvcodec_options INTERFACE -fsanitize=${KVCODEC_SANITIZE})
endif()
if(KVCODEC_BUILD_FUZZERS)
  # Coverage instrumentation in every kvcodec library, so libFuzzer sees inside the parsers
  # and not only the fuzz entry point.
  target_compile_options(kvcodec_options INTERFACE -fsanitize=fuzzer-no-link)
endif()

# kvcodec_module(<name> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# A module library kvc_<name>; sources include each other as "module/file.h" from src/.
# HOT: the module holds compute kernels (codecs, entropy coders, PCA, conversions) and is built
# with -O3 in every optimised configuration: GCC 12 at -O2 vectorises only loops whose trip
# count it knows, which left kvtc's quantiser, dequantiser and checks scalar (kvtc decode on
# 256-token chunks ran about 1.5x faster at -O3). The rest of the project stays at the
# configuration's level, where GCC 12's -O3 std::string false positives (-Wrestrict) do not fire.
function(kvcodec_module name)
  cmake_parse_arguments(ARG "HOT" "FOLDER" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(kvc_${name} STATIC ${ARG_SOURCES})
  target_include_directories(kvc_${name} PUBLIC "${PROJECT_SOURCE_DIR}/src")
  target_link_libraries(kvc_${name} PUBLIC kvcodec_options ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(kvc_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(ARG_HOT)
    target_compile_options(kvc_${name} PRIVATE $<$<NOT:$<CONFIG:Debug>>:-O3>)
  endif()
endfunction()

# kvcodec_test(<name> SOURCES ... DEPS ... LABEL unit|model|slow [SERIAL])
# SERIAL: ctest runs the tests alone (for tests that measure time).
function(kvcodec_test name)
  if(NOT KVCODEC_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "SERIAL" "LABEL" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_LABEL)
    set(ARG_LABEL unit)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE kvcodec_options ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE KVCODEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                             KVCODEC_TEST_MODEL="${PROJECT_SOURCE_DIR}/models/kvtiny/kvtiny.gguf")
  set(serial FALSE)
  if(ARG_SERIAL)
    set(serial TRUE)
  endif()
  # One llama.cpp thread per test (llama_engine.cc, DefaultThreads): ctest runs tests side by side.
  gtest_discover_tests(${name} PROPERTIES LABELS ${ARG_LABEL} RUN_SERIAL ${serial} ENVIRONMENT KVCODEC_THREADS=1
                       DISCOVERY_TIMEOUT 120)
endfunction()

# kvcodec_benchmark(<name> SOURCES ... DEPS ...)
function(kvcodec_benchmark name)
  if(NOT KVCODEC_BUILD_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE kvcodec_options ${ARG_DEPS} benchmark::benchmark benchmark::benchmark_main)
endfunction()

# kvcodec_fuzzer(<name> SOURCE file.cc DEPS ...)
# Always builds <name>_replay, which runs fuzz/corpus/<name>/* through the target as a ctest
# test; with KVCODEC_BUILD_FUZZERS (clang) also builds the libFuzzer binary <name>_fuzz.
function(kvcodec_fuzzer name)
  cmake_parse_arguments(ARG "" "SOURCE" "DEPS" ${ARGN})
  set(corpus "${PROJECT_SOURCE_DIR}/fuzz/corpus/${name}")
  if(KVCODEC_BUILD_TESTS)
    add_executable(${name}_replay ${ARG_SOURCE} "${PROJECT_SOURCE_DIR}/fuzz/replay_main.cc")
    target_link_libraries(${name}_replay PRIVATE kvcodec_options ${ARG_DEPS})
    add_test(NAME fuzz_replay.${name} COMMAND ${name}_replay "${corpus}")
    set_tests_properties(fuzz_replay.${name} PROPERTIES LABELS unit)
  endif()
  if(KVCODEC_BUILD_FUZZERS)
    add_executable(${name}_fuzz ${ARG_SOURCE})
    target_link_libraries(${name}_fuzz PRIVATE kvcodec_options ${ARG_DEPS})
    target_compile_options(${name}_fuzz PRIVATE -fsanitize=fuzzer)
    target_link_options(${name}_fuzz PRIVATE -fsanitize=fuzzer)
  endif()
endfunction()
