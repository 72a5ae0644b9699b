# Runs one fuzz target for SECONDS on its seeds (fuzz/CMakeLists.txt's ctest entries): new
# inputs go to WORK/corpus/NAME, a crash to WORK/artifacts/NAME-crash-<sha1>.
file(MAKE_DIRECTORY ${WORK}/corpus/${NAME} ${WORK}/artifacts)
if(SYMBOLIZER)
  set(ENV{ASAN_SYMBOLIZER_PATH} ${SYMBOLIZER})
endif()
set(seed_arg)
if(SEED AND NOT SEED EQUAL 0)
  set(seed_arg -seed=${SEED})
endif()
set(runs_arg)
if(RUNS AND NOT RUNS EQUAL 0)
  set(runs_arg -runs=${RUNS})
endif()
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} ${seed_arg} ${runs_arg} -timeout=10 -rss_limit_mb=2048 -max_len=65536
          -close_fd_mask=3 -print_final_stats=1 -artifact_prefix=${WORK}/artifacts/${NAME}-
          ${WORK}/corpus/${NAME} ${SEEDS}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  # The run above hides the target's output (-close_fd_mask); replay what it wrote so the report
  # (the sanitizer's or the check's) is in the log.
  file(GLOB _found ${WORK}/artifacts/${NAME}-*)
  foreach(f IN LISTS _found)
    execute_process(COMMAND ${FUZZER} ${f} ERROR_VARIABLE _report OUTPUT_QUIET)
    string(REGEX MATCHALL "[^\n]*(runtime error|ERROR|SUMMARY|Assertion|kgpu fuzz)[^\n]*" _lines "${_report}")
    list(JOIN _lines "\n" _lines)
    message(STATUS "${f}:\n${_lines}")
  endforeach()
  message(FATAL_ERROR "fuzz target ${NAME} found a problem (exit ${rc}): the input is in ${WORK}/artifacts/; "
                      "reproduce with ${FUZZER} <file>, then add it to fuzz/corpus/${NAME}/ and a test (fuzz/README.md)")
endif()
