# hd_add_criterion_test(<name> SOURCES <files...> LIBS <targets...> [LABELS <labels...>] [TIMEOUT s])
# Builds one Criterion test binary <name> and registers it with ctest under the same name
# (test_<module>_<case>). Exit code 77 means "skipped: a kernel feature is missing".
include_guard(GLOBAL)
function(hd_add_criterion_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} hd::criterion)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  # --jobs=1 keeps tests that pin threads or start shards from fighting over the two cores.
  add_test(NAME ${name} COMMAND ${name} --jobs=1 --ascii)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT}
                       LABELS "${T_LABELS}")
endfunction()

# hd_add_program_test(<name> COMMAND <cmd...> [LABELS ...] [TIMEOUT s]): a test that runs real
# programs (integration tests: scripts that start binaries on loopback).
function(hd_add_program_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "COMMAND;LABELS" ${ARGN})
  add_test(NAME ${name} COMMAND ${T_COMMAND})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT}
                       LABELS "${T_LABELS}")
endfunction()
