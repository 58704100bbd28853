# Helpers that give every kvcodec target the same standard, warnings and sanitizers.

add_library(kvcodec_options INTERFACE)
target_compile_features(kvcodec_options INTERFACE cxx_std_20)
target_compile_options(kvcodec_options INTERFACE -Wall -Wextra -Wno-missing-field-initializers)
# Hidden by default: libkvcodec exports only the C API (KVC_API), and calls inside it need no
# interposable symbols.
target_compile_options(kvcodec_options INTERFACE -fvisibility=hidden -fvisibility-inlines-hidden)
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

# The dependency graph, enforced (README.md, "Source layout and dependency graph"). Each module
# sees, on its include path, only its own folder and those of the modules it depends on
# (transitively): a view directory of symlinks, include_views/kvc_<name>/<folder> ->
# src/<folder>, instead of all of src/. An include of a module it does not depend on is then a
# compile error rather than a silent new edge. kvcodec_deps.txt records the same graph for the
# deps.graph test (scripts/check_deps.sh), which also checks README.md against it.
set(KVCODEC_DEPS_FILE "${CMAKE_BINARY_DIR}/kvcodec_deps.txt")
file(WRITE "${KVCODEC_DEPS_FILE}" "")
file(REMOVE_RECURSE "${CMAKE_BINARY_DIR}/include_views")

# The folders that the kvc_ libraries among `deps` see (each one's closure), in `out`.
function(_kvcodec_closure out)
  set(folders "")
  foreach(dep IN LISTS ARGN)
    if(dep MATCHES "^kvc_(.+)$")
      get_property(known GLOBAL PROPERTY KVCODEC_CLOSURE_${CMAKE_MATCH_1} SET)
      if(NOT known)
        message(FATAL_ERROR "${dep} is used before it is defined: define modules in dependency order")
      endif()
      get_property(dep_folders GLOBAL PROPERTY KVCODEC_CLOSURE_${CMAKE_MATCH_1})
      list(APPEND folders ${dep_folders})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES folders)
  list(SORT folders)
  set(${out} "${folders}" PARENT_SCOPE)
endfunction()

# kvcodec_record_sources(<deps> <source>...): notes for scripts/check_deps.sh the folders a
# source outside a module (a test, fuzzer, benchmark, the C API) may include from: those of
# what it links. Written by kvcodec_write_deps once every module is defined
# (a test may link a module defined after its folder, as the server's tests link bench).
function(kvcodec_record_sources deps)
  list(JOIN deps "," deps)
  foreach(src IN LISTS ARGN)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}/${src}")
    set_property(GLOBAL APPEND PROPERTY KVCODEC_SOURCES "${rel}|${deps}")
  endforeach()
endfunction()

# Call once, after every add_subdirectory: completes kvcodec_deps.txt and adds the deps.graph
# test, which checks every include in src/ against the graph and README.md against CMake.
function(kvcodec_write_deps)
  get_property(records GLOBAL PROPERTY KVCODEC_SOURCES)
  foreach(record IN LISTS records)
    string(REPLACE "|" ";" parts "${record}")
    list(GET parts 0 rel)
    list(LENGTH parts n)
    set(deps "")
    if(n GREATER 1)
      list(GET parts 1 deps)
      string(REPLACE "," ";" deps "${deps}")
    endif()
    _kvcodec_closure(folders ${deps})
    list(JOIN folders "," folders)
    if(folders STREQUAL "")
      set(folders "-")
    endif()
    file(APPEND "${KVCODEC_DEPS_FILE}" "source ${rel} ${folders}\n")
  endforeach()
  if(KVCODEC_BUILD_TESTS)
    add_test(NAME deps.graph COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/check_deps.sh" "${KVCODEC_DEPS_FILE}")
    set_tests_properties(deps.graph PROPERTIES LABELS unit)
  endif()
endfunction()

# kvcodec_module(<name> [FOLDER <folder>] SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...] [HOT])
# A module library kvc_<name> of the sources in src/<folder> (default: <name>); they include
# each other and their dependencies as "module/file.h". Modules must be defined after the
# kvc_ modules they depend on (PUBLIC or PRIVATE), whose folders their include path then shows.
# HOT: the module holds compute kernels (codecs, entropy coders, PCA, conversions) and is built
# with -O3 in every optimised configuration: GCC 12 at -O2 vectorises only loops whose trip
# count it knows, which left kvtc's quantiser, dequantiser and checks scalar (kvtc decode on
# 256-token chunks ran about 1.5x faster at -O3). The rest of the project stays at the
# configuration's level, where GCC 12's -O3 std::string false positives (-Wrestrict) do not fire.
function(kvcodec_module name)
  cmake_parse_arguments(ARG "HOT" "FOLDER" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT ARG_FOLDER)
    set(ARG_FOLDER ${name})
  endif()
  set(direct "")
  foreach(dep IN LISTS ARG_PUBLIC_DEPS ARG_PRIVATE_DEPS)
    if(dep MATCHES "^kvc_(.+)$")
      get_property(dep_folder GLOBAL PROPERTY KVCODEC_FOLDER_${CMAKE_MATCH_1})
      list(APPEND direct ${dep_folder})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES direct)
  list(SORT direct)
  _kvcodec_closure(closure ${ARG_PUBLIC_DEPS} ${ARG_PRIVATE_DEPS})
  list(APPEND closure ${ARG_FOLDER})
  list(REMOVE_DUPLICATES closure)
  list(SORT closure)
  set_property(GLOBAL PROPERTY KVCODEC_FOLDER_${name} ${ARG_FOLDER})
  set_property(GLOBAL PROPERTY KVCODEC_CLOSURE_${name} ${closure})

  set(view "${CMAKE_BINARY_DIR}/include_views/kvc_${name}")
  file(MAKE_DIRECTORY "${view}")
  foreach(folder IN LISTS closure)
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/src/${folder}" "${view}/${folder}" SYMBOLIC)
  endforeach()
  list(JOIN direct "," direct_text)
  list(JOIN closure "," closure_text)
  if(direct_text STREQUAL "")
    set(direct_text "-")
  endif()
  file(APPEND "${KVCODEC_DEPS_FILE}" "module ${name} ${ARG_FOLDER} ${direct_text} ${closure_text}\n")

  add_library(kvc_${name} STATIC ${ARG_SOURCES})
  target_include_directories(kvc_${name} PUBLIC "${view}")
  target_link_libraries(kvc_${name} PUBLIC kvcodec_options ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(kvc_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(ARG_HOT)
    target_compile_options(kvc_${name} PRIVATE $<$<NOT:$<CONFIG:Debug>>:-O3>)
  endif()
endfunction()

# unit_tests: every executable the ctest label `unit` runs, so a build that only runs those
# (scripts/test.sh's ASan+UBSan pass) builds them alone, not the CLI and the model tests
# (nearly half of that preset's compile time).
if(KVCODEC_BUILD_TESTS AND NOT TARGET unit_tests)
  add_custom_target(unit_tests)
endif()

# kvcodec_test(<name> SOURCES ... DEPS ... LABEL unit|model [SERIAL])
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
  kvcodec_record_sources("${ARG_DEPS}" ${ARG_SOURCES})
  target_compile_definitions(${name} PRIVATE KVCODEC_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                             KVCODEC_TEST_MODEL="${PROJECT_SOURCE_DIR}/models/kvtiny/kvtiny.gguf"
                                             KVCODEC_ARCHS_FIXTURES="${KVCODEC_ARCHS_FIXTURES}")
  set(serial FALSE)
  if(ARG_SERIAL)
    set(serial TRUE)
  endif()
  if(ARG_LABEL STREQUAL "unit")
    add_dependencies(unit_tests ${name})
  endif()
  # One llama.cpp thread per test (llama_session.cc, DefaultThreads): ctest runs tests side by side.
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
  kvcodec_record_sources("${ARG_DEPS}" ${ARG_SOURCES})
endfunction()

# kvcodec_fuzzer(<name> SOURCE file.cc DEPS ...)
# Always builds <name>_replay, which runs fuzz/corpus/<name>/* through the target as a ctest
# test; with KVCODEC_BUILD_FUZZERS (clang) also builds the libFuzzer binary <name>_fuzz.
function(kvcodec_fuzzer name)
  cmake_parse_arguments(ARG "" "SOURCE" "DEPS" ${ARGN})
  set(corpus "${PROJECT_SOURCE_DIR}/fuzz/corpus/${name}")
  kvcodec_record_sources("${ARG_DEPS}" ${ARG_SOURCE})
  if(KVCODEC_BUILD_TESTS)
    add_executable(${name}_replay ${ARG_SOURCE} "${PROJECT_SOURCE_DIR}/fuzz/replay_main.cc")
    target_link_libraries(${name}_replay PRIVATE kvcodec_options ${ARG_DEPS})
    add_test(NAME fuzz_replay.${name} COMMAND ${name}_replay "${corpus}")
    set_tests_properties(fuzz_replay.${name} PROPERTIES LABELS unit)
    add_dependencies(unit_tests ${name}_replay)
  endif()
  if(KVCODEC_BUILD_FUZZERS)
    add_executable(${name}_fuzz ${ARG_SOURCE})
    target_link_libraries(${name}_fuzz PRIVATE kvcodec_options ${ARG_DEPS})
    target_compile_options(${name}_fuzz PRIVATE -fsanitize=fuzzer)
    target_link_options(${name}_fuzz PRIVATE -fsanitize=fuzzer)
  endif()
endfunction()
