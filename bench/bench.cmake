# bench/bench.cmake - the benchmarks (bench/run) and their smoke tests,
# included from the root CMakeLists.txt (binaries stay in the build root,
# where bench/run finds them).

if(SLUICE_BUILD_BENCH)
  file(GLOB SLUICE_BENCH_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/bench/bench_*.c)
  sluice_without(SLUICE_BENCH_SOURCES "" "/bench_image\\.c$")
  foreach(src ${SLUICE_BENCH_SOURCES})
    get_filename_component(exe ${src} NAME_WE)
    add_executable(${exe} ${src})
    target_link_libraries(${exe} PRIVATE sluice_static PkgConfig::ZSTD)
  endforeach()
  # The harness runs on tiny data and its JSON parses (no figure checked).
  if(SLUICE_BUILD_TESTS)
    add_test(NAME bench.smoke COMMAND bash ${PROJECT_SOURCE_DIR}/bench/smoke
                                      $<TARGET_FILE_DIR:bench_slr>)
    set_tests_properties(bench.smoke PROPERTIES TIMEOUT 300 LABELS bench)
  endif()
endif()

# The peers' harness runs from this build as CI runs it, from a clean clone
# (bench/peers/run --smoke: one round of one epoch, no figure checked; the
# sluice cases must give results, a peer not installed is reported
# skipped).  Not in sanitizer builds: luajit and python would load an
# instrumented libsluice.
if(SLUICE_BUILD_BENCH AND SLUICE_BUILD_TESTS AND SLUICE_WITH_LUA AND
   NOT SLUICE_ASAN AND NOT SLUICE_TSAN AND NOT SLUICE_UBSAN)
  set(_peers_only "limit,sluice,torch,tf,paddle,grain")
  set(_peers_python python3)
  if(TARGET sluice_python)
    set(_peers_only "limit,sluice,binding,torch,tf,paddle,grain")
    set(_peers_python ${SLUICE_PYTHON_EXECUTABLE})
  endif()
  add_test(NAME bench.peers_smoke
           COMMAND ${_peers_python} ${PROJECT_SOURCE_DIR}/bench/peers/run
                   --build ${CMAKE_BINARY_DIR} --smoke --only ${_peers_only})
  set_tests_properties(bench.peers_smoke PROPERTIES TIMEOUT 900 LABELS bench)
endif()

# bench/cpu_under_load runs (one short run of each pipeline, quiet and
# beside busy loops, on the Fashion-MNIST test set packed here; no figure
# checked): its medians come out for every (load, pipeline).
if(SLUICE_BUILD_BENCH AND SLUICE_BUILD_TESTS AND SLUICE_WITH_LUA AND
   NOT SLUICE_ASAN AND NOT SLUICE_TSAN AND NOT SLUICE_UBSAN)
  add_test(NAME bench.cpu_under_load_smoke
           COMMAND bash ${PROJECT_SOURCE_DIR}/bench/cpu_under_load_smoke
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(bench.cpu_under_load_smoke PROPERTIES TIMEOUT 300
                       LABELS bench SKIP_RETURN_CODE 77)
endif()

# bench/bench_autotune.lua runs (the grid and the defaults, once, on tiny
# token shards and a few JPEGs; no figure checked).
if(SLUICE_BUILD_BENCH AND SLUICE_BUILD_TESTS AND SLUICE_WITH_LUA AND
   NOT SLUICE_ASAN AND NOT SLUICE_TSAN AND NOT SLUICE_UBSAN)
  add_test(NAME bench.autotune_smoke
           COMMAND bash ${PROJECT_SOURCE_DIR}/bench/autotune_smoke
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(bench.autotune_smoke PROPERTIES TIMEOUT 300
                       LABELS bench)
endif()
