# The code examples of README.md and docs/*.md run as tests: one CTest test
# docs.<NAME> per Markdown file (docs.README, docs.LUA, ...), driven by
# tests/docs/run_examples.py, which extracts the fenced blocks and runs
# them against this build (docs/ARCHITECTURE.md, "Doc examples are
# tests").  Included from the top-level CMakeLists.txt.
#
# They need the whole library (Lua and images: the examples use both) and
# run uninstrumented (a sanitizer build checks memory, not the docs).
if(SLUICE_BUILD_TESTS AND SLUICE_WITH_LUA AND SLUICE_WITH_IMAGES
   AND NOT SLUICE_SAN_FLAGS)
  if(NOT Python3_EXECUTABLE)
    find_package(Python3 COMPONENTS Interpreter)
  endif()
  set(_docs_binding "")
  if(TARGET sluice_python)
    set(_docs_binding "${CMAKE_BINARY_DIR}/bindings/python")
  endif()
  file(GLOB _docs_md CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/*.md)
  foreach(md ${_docs_md})
    get_filename_component(name ${md} NAME_WE)
    if(Python3_EXECUTABLE)
      add_test(NAME docs.${name}
               COMMAND ${Python3_EXECUTABLE}
                       ${PROJECT_SOURCE_DIR}/tests/docs/run_examples.py ${md}
                       --source ${PROJECT_SOURCE_DIR} --build ${CMAKE_BINARY_DIR}
                       --sluice $<TARGET_FILE:sluice_cli> --cc ${CMAKE_C_COMPILER}
                       --python-binding=${_docs_binding})
    else()
      add_test(NAME docs.${name}
               COMMAND sh -c "echo 'python3 not found: make deps'; exit 1")
    endif()
    set_tests_properties(docs.${name} PROPERTIES TIMEOUT 300 LABELS docs)
  endforeach()
  # The harness itself: what it must fail on (a stale block, a bad marker,
  # a broken link, ...) and what it must pass.
  if(Python3_EXECUTABLE)
    add_test(NAME docs.harness
             COMMAND bash ${PROJECT_SOURCE_DIR}/tests/docs/selftest.sh
                     ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                     $<TARGET_FILE:sluice_cli>)
    set_tests_properties(docs.harness PROPERTIES TIMEOUT 300 LABELS docs)
  endif()
endif()
