# ctest driver for a libFuzzer target: fresh seed corpus, run for SECONDS, fail on any crash/sanitizer report.
# cmake [-DNAME=<name>] -DSEEDGEN=<seed generator> -DFUZZER=<fuzzer> -DWORK_DIR=<dir> -DSECONDS=60 -P run_fuzz.cmake
foreach(v SEEDGEN FUZZER WORK_DIR SECONDS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzz.cmake: ${v} not set")
  endif()
endforeach()
if(NOT DEFINED NAME)
  set(NAME "${FUZZER}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}/corpus" "${WORK_DIR}/seeds" "${WORK_DIR}/artifacts")
file(MAKE_DIRECTORY "${WORK_DIR}/corpus" "${WORK_DIR}/seeds" "${WORK_DIR}/artifacts")
execute_process(COMMAND "${SEEDGEN}" "${WORK_DIR}/seeds" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "seed generation failed: ${rc}")
endif()
# New inputs go to corpus/ (first directory); seeds/ is read only.
execute_process(COMMAND "${FUZZER}" "-max_total_time=${SECONDS}" -print_final_stats=1 -timeout=10
                        -rss_limit_mb=4096 "-artifact_prefix=${WORK_DIR}/artifacts/"
                        "${WORK_DIR}/corpus" "${WORK_DIR}/seeds"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME} failed (exit ${rc}); reproducers in ${WORK_DIR}/artifacts")
endif()
file(GLOB crashes "${WORK_DIR}/artifacts/*")
if(crashes)
  message(FATAL_ERROR "${NAME} left artifacts: ${crashes}")
endif()
