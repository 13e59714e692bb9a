# hearth_add_test(NAME SOURCES a.cc b.cc LIBS lib... [LABELS l...])
# One GoogleTest binary; each TEST becomes its own ctest entry so failures name the case.
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
    PROPERTIES LABELS "${labels}" TIMEOUT 600
               ENVIRONMENT HEARTH_TOKENIZER_IMAGE_CACHE=${PROJECT_BINARY_DIR}/tokenizer-images)
endfunction()
