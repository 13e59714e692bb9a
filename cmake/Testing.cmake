# hearth_add_test(NAME SOURCES a.cc b.cc LIBS lib... [LABELS l...])
# One GoogleTest binary; each TEST becomes its own ctest entry so failures name the case.
#
# Labels say which pass runs a test (tools/run-tests.sh):
#   unit         in one process, quick: both passes
#   fuzz         seeded mutations of a parser or protocol: both passes
#   integration  real processes and sockets, the default model end to end: the release pass
#   sanitize     with integration: a short multi-process case the sanitizer pass runs too
#   gpu          needs a CUDA device (skips without one): the release pass
# The sanitizer pass builds only the target sanitizer_tests: the binaries of its tests.
include(GoogleTest)
function(hearth_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE
    HEARTH_SOURCE_DIR="${PROJECT_SOURCE_DIR}" HEARTH_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set(labels ${T_LABELS})
  if(NOT labels)
    set(labels unit)
  endif()
  # Tokenizer images the tests' workers cache go to the build tree, not the user's ~/.cache.
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT 600
               ENVIRONMENT HEARTH_TOKENIZER_IMAGE_CACHE=${PROJECT_BINARY_DIR}/tokenizer-images)
  # Labels are set by a script of our own that runs after discovery: gtest_discover_tests'
  # PROPERTIES flattens a list value, so "unit;fuzz" would reach ctest as the label unit alone.
  set(label_script ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(WRITE ${label_script}
    "foreach(test IN LISTS ${name}_TESTS)\n"
    "  set_tests_properties(\"\${test}\" PROPERTIES LABELS \"${labels}\")\n"
    "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${label_script})
  if(labels MATCHES "(^|;)(unit|fuzz|sanitize)(;|$)" AND NOT labels MATCHES "(^|;)gpu(;|$)")
    set_property(GLOBAL APPEND PROPERTY HEARTH_SANITIZER_TESTS ${name})
  endif()
endfunction()
