# run_fuzz.cmake - one libFuzzer smoke run: copy the committed corpus to WORK (the fuzzer adds
# inputs to its corpus directory, and that must never be the source tree), run with a fixed seed,
# fail on any crash, leak, sanitizer report or invariant abort. Crash inputs land in WORK/artifacts.
# Usage: cmake -DFUZZER=<exe> -DCORPUS=<dir> -DWORK=<dir> -DRUNS=<n> -DMAX_TIME=<s> -P run_fuzz.cmake
foreach(var FUZZER CORPUS WORK RUNS MAX_TIME)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake: -D${var}= is required")
  endif()
endforeach()
if(NOT IS_DIRECTORY ${CORPUS})
  message(FATAL_ERROR "run_fuzz.cmake: no seed corpus at ${CORPUS}")
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
file(COPY ${CORPUS}/ DESTINATION ${WORK}/corpus)
execute_process(COMMAND ${FUZZER} -seed=1 -runs=${RUNS} -max_total_time=${MAX_TIME}
                        -artifact_prefix=${WORK}/artifacts/ ${WORK}/corpus
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (${rc}); reproducer in ${WORK}/artifacts/")
endif()
