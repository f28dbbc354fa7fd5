# Project-wide warnings, applied per target with qpu_warnings(target).
function(qpu_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
    -Wconversion -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Woverloaded-virtual -Wdouble-promotion
    -Wformat=2 -Wimplicit-fallthrough)
endfunction()

# Labels whose test binaries are not built (CMake cache): a binary whose tests all carry
# one of them would be built for nothing where those labels are not run. The sanitizer
# preset skips slow, transformers and long (its ctest run excludes them); test.sh skips
# long unless QPU_LONG_TESTS=1. Binaries with other tests too are always built.
set(QPU_UNBUILT_TEST_LABELS "" CACHE STRING "Test labels whose test binaries are not built (a list; empty: all)")
# qpu_tests_wanted(var label...): var is TRUE when some of the binary's labels is built.
function(qpu_tests_wanted var)
  set(${var} FALSE PARENT_SCOPE)
  foreach(label IN LISTS ARGN)
    if(NOT label IN_LIST QPU_UNBUILT_TEST_LABELS)
      set(${var} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# qpu_test(name SOURCES ... LIBS ...): a GoogleTest executable registered with CTest.
function(qpu_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  qpu_warnings(${name})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE QPU_SHARED_DIR="${QPU_SHARED_DIR}"
    QPU_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS unit)
endfunction()

# qpu_whole_binary_test(name LABEL label): registers a GoogleTest executable as ONE CTest
# test, so its tests run in one process. For binaries whose tests share an expensive
# build held in function-local statics (a stories260K machine and its engine model take
# ~85 s): gtest_discover_tests would run each test in its own process and pay the build
# again per test (the token machine's 7 tests: 803 s that way). A failure still names the
# failing test in the output that ctest --output-on-failure prints.
function(qpu_whole_binary_test name)
  cmake_parse_arguments(T "" "LABEL" "" ${ARGN})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS ${T_LABEL} TIMEOUT 3600 ENVIRONMENT OMP_NUM_THREADS=1)
endfunction()

# Properties of the tests that run stock transformers (label transformers). torch's intra-op
# pool takes every core by default; beside another test (ctest -j 2 on two cores) that
# oversubscribes them, and a forward of the FFN machine (342 small layers) took 6.7 s with
# 2 threads against 1.5 s with 1 (same box, same load). One thread each: OpenMP's
# OMP_NUM_THREADS sets torch's pool and the test's own engine threads alike.
set(QPU_TRANSFORMERS_TEST_PROPERTIES LABELS transformers ENVIRONMENT OMP_NUM_THREADS=1)
