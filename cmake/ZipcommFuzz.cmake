# libFuzzer support.
#
# Results:
#   ZIPCOMM_BUILD_FUZZ     option; default ON when the C++ compiler, or a clang++ found on the system, supports
#                          -fsanitize=fuzzer
#   ZIPCOMM_FUZZ_NATIVE    ON when CMAKE_CXX_COMPILER itself supports it (fuzzers are normal executables)
#   ZIPCOMM_FUZZ_CXX       the clang++ used otherwise (fuzzers are built by a custom command)
#   ZIPCOMM_FUZZ_FLAGS     compile+link flags of a fuzzer (libFuzzer + ASan + UBSan, aborting on UB)
#
# zipcomm_add_fuzzer(<name> SOURCES <src>... [INCLUDE_DIRECTORIES <dir>...] [COMPILE_DEFINITIONS <def>...])
#   Builds target <name> (part of ALL): the fuzzer executable ${CMAKE_CURRENT_BINARY_DIR}/fuzzers/<name>,
#   with zipcomm's include directory, C++17 and ZIPCOMM_FUZZ_FLAGS; sets <name>_PATH to that path in the
#   caller's scope. Sources must be host C++ (no CUDA). Register tests with that path (not the target name,
#   which may be a custom target), and label them `fuzz`, e.g.
#     zipcomm_add_fuzzer(fuzz_decode SOURCES fuzz/fuzz_decode.cpp)
#     add_test(NAME fuzz_decode COMMAND ${fuzz_decode_PATH} -runs=20000 -seed=1 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus)
#     set_tests_properties(fuzz_decode PROPERTIES LABELS fuzz)
include(CheckCXXSourceCompiles)

set(ZIPCOMM_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1)
set(_zipcomm_fuzz_src [=[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return size > 0 && data[0] == 1; }
]=])

set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer")
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles("${_zipcomm_fuzz_src}" ZIPCOMM_FUZZ_NATIVE)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
unset(CMAKE_REQUIRED_QUIET)

set(_zipcomm_fuzz_possible OFF)
if(ZIPCOMM_FUZZ_NATIVE)
  set(_zipcomm_fuzz_possible ON)
  message(STATUS "zipcomm: libFuzzer: ${CMAKE_CXX_COMPILER} supports -fsanitize=fuzzer")
else()
  find_program(ZIPCOMM_FUZZ_CXX NAMES clang++ clang++-20 clang++-19 clang++-18 clang++-17 clang++-16 clang++-15
               clang++-14 DOC "clang++ used to build libFuzzer targets")
  if(ZIPCOMM_FUZZ_CXX)
    if(NOT DEFINED ZIPCOMM_FUZZ_CXX_WORKS OR NOT "${ZIPCOMM_FUZZ_CXX_CHECKED}" STREQUAL "${ZIPCOMM_FUZZ_CXX}")
      set(_dir "${PROJECT_BINARY_DIR}/CMakeFiles/zipcomm_fuzz_check")
      file(MAKE_DIRECTORY "${_dir}")
      file(WRITE "${_dir}/fuzz_check.cpp" "${_zipcomm_fuzz_src}")
      execute_process(COMMAND "${ZIPCOMM_FUZZ_CXX}" -fsanitize=fuzzer,address,undefined fuzz_check.cpp -o fuzz_check
                      WORKING_DIRECTORY "${_dir}" RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
      if(_rc EQUAL 0)
        set(ZIPCOMM_FUZZ_CXX_WORKS ON CACHE INTERNAL "")
      else()
        set(ZIPCOMM_FUZZ_CXX_WORKS OFF CACHE INTERNAL "")
      endif()
      set(ZIPCOMM_FUZZ_CXX_CHECKED "${ZIPCOMM_FUZZ_CXX}" CACHE INTERNAL "")
    endif()
    if(ZIPCOMM_FUZZ_CXX_WORKS)
      set(_zipcomm_fuzz_possible ON)
      message(STATUS "zipcomm: libFuzzer: using ${ZIPCOMM_FUZZ_CXX} for fuzz targets")
    else()
      message(STATUS "zipcomm: libFuzzer: ${ZIPCOMM_FUZZ_CXX} cannot link -fsanitize=fuzzer "
                     "(install libclang-rt-<version>-dev)")
    endif()
  endif()
endif()

option(ZIPCOMM_BUILD_FUZZ "Build the libFuzzer targets (needs a compiler supporting -fsanitize=fuzzer)"
       ${_zipcomm_fuzz_possible})
if(ZIPCOMM_BUILD_FUZZ AND NOT _zipcomm_fuzz_possible)
  message(WARNING "zipcomm: ZIPCOMM_BUILD_FUZZ is ON but no compiler supports -fsanitize=fuzzer "
                  "(install clang + libclang-rt-dev: bash scripts/install-deps.sh); fuzzers are NOT built")
  set(ZIPCOMM_BUILD_FUZZ OFF)
endif()

function(zipcomm_add_fuzzer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;INCLUDE_DIRECTORIES;COMPILE_DEFINITIONS")
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "zipcomm_add_fuzzer(${name}): no SOURCES")
  endif()
  set(out "${CMAKE_CURRENT_BINARY_DIR}/fuzzers/${name}")
  set(${name}_PATH "${out}" PARENT_SCOPE)
  set(srcs "")
  foreach(s IN LISTS arg_SOURCES)
    get_filename_component(s "${s}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND srcs "${s}")
  endforeach()
  if(ZIPCOMM_FUZZ_NATIVE)
    add_executable(${name} ${srcs})
    target_link_libraries(${name} PRIVATE zipcomm)
    target_include_directories(${name} PRIVATE ${arg_INCLUDE_DIRECTORIES})
    target_compile_definitions(${name} PRIVATE ${arg_COMPILE_DEFINITIONS})
    target_compile_options(${name} PRIVATE ${ZIPCOMM_FUZZ_FLAGS})
    target_link_options(${name} PRIVATE ${ZIPCOMM_FUZZ_FLAGS})
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/fuzzers")
  else()
    set(flags -std=c++17 ${ZIPCOMM_FUZZ_FLAGS} "-I${PROJECT_SOURCE_DIR}/include")
    foreach(d IN LISTS arg_INCLUDE_DIRECTORIES)
      get_filename_component(d "${d}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
      list(APPEND flags "-I${d}")
    endforeach()
    foreach(d IN LISTS arg_COMPILE_DEFINITIONS)
      list(APPEND flags "-D${d}")
    endforeach()
    file(GLOB_RECURSE hdrs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/include/zipcomm/*")
    foreach(s IN LISTS srcs)  # headers beside a fuzzer's sources (e.g. a shared check macro)
      get_filename_component(d "${s}" DIRECTORY)
      file(GLOB local CONFIGURE_DEPENDS "${d}/*.hpp")
      list(APPEND hdrs ${local})
    endforeach()
    add_custom_command(OUTPUT "${out}"
                       COMMAND "${CMAKE_COMMAND}" -E make_directory "${CMAKE_CURRENT_BINARY_DIR}/fuzzers"
                       COMMAND "${ZIPCOMM_FUZZ_CXX}" ${flags} ${srcs} -o "${out}"
                       DEPENDS ${srcs} ${hdrs}
                       COMMENT "Building libFuzzer target ${name} with ${ZIPCOMM_FUZZ_CXX}"
                       VERBATIM)
    add_custom_target(${name} ALL DEPENDS "${out}")
  endif()
endfunction()
