# tests/tests.cmake - the tests of the C library, the CLI and the Lua layer
# (CTest), included from the root CMakeLists.txt (one directory scope: the
# tests' properties are set where they are added).  Each suite's own
# registration: tests/test_*.c, tests/cli/*.sh, spec/*_spec.lua (globs).

# --- tests -------------------------------------------------------------------------
if(SLUICE_BUILD_TESTS)
  # Each tests/test_*.c is one executable; each TEST(name) in it is one CTest
  # test, run as `<exe> <name>`, so CTest's summary lists every contract.
  file(GLOB SLUICE_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/test_*.c)
  list(FILTER SLUICE_TEST_SOURCES EXCLUDE REGEX "/test_(util|main)\\.c$")
  # Suites of a layer left out are not built (test_shutdown runs Lua stages).
  sluice_without(SLUICE_TEST_SOURCES "/test_(lua_.*|pipeline|shutdown)\\.c$"
                 "/test_image\\.c$")
  foreach(src ${SLUICE_TEST_SOURCES})
    get_filename_component(exe ${src} NAME_WE)
    add_executable(${exe} ${src} ${PROJECT_SOURCE_DIR}/tests/test_main.c
                          ${PROJECT_SOURCE_DIR}/tests/test_util.c)
    target_link_libraries(${exe} PRIVATE sluice_static ZLIB::ZLIB)
    # Export the public sl_* symbols (SL_API is default visibility even in
    # the static library) so LuaJIT's ffi.C finds them in worker states.
    set_target_properties(${exe} PROPERTIES ENABLE_EXPORTS ON)
    target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
    target_compile_definitions(${exe} PRIVATE SLUICE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
      SLUICE_WITH_LUA=$<BOOL:${SLUICE_WITH_LUA}>
      SLUICE_WITH_IMAGES=$<BOOL:${SLUICE_WITH_IMAGES}>)
    string(REGEX REPLACE "^test_" "" suite ${exe})
    file(STRINGS ${src} lines REGEX "^TEST\\([A-Za-z0-9_]+\\)")
    foreach(line ${lines})
      string(REGEX REPLACE "^TEST\\(([A-Za-z0-9_]+)\\).*" "\\1" name "${line}")
      add_test(NAME ${suite}.${name} COMMAND ${exe} ${name})
      # TEST_SKIP (tests/test.h) exits 77: CTest reports the test Skipped.
      set_tests_properties(${suite}.${name} PROPERTIES TIMEOUT 300 LABELS ${suite}
                           SKIP_RETURN_CODE 77)
    endforeach()
  endforeach()
  # Each tests/cli/*.sh drives the built `sluice` binary: CTest test cli.<name>.
  file(GLOB SLUICE_CLI_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/cli/*.sh)
  sluice_without(SLUICE_CLI_TESTS
                 "/(run|resume|resume_trainer|trainer_lua_path|memory)\\.sh$"
                 "/pack_images\\.sh$")
  if(SLUICE_WITH_LUA AND SLUICE_WITH_IMAGES)
    # Only a build without a layer runs the check of its answers.
    list(FILTER SLUICE_CLI_TESTS EXCLUDE REGEX "/without_layers\\.sh$")
  endif()
  foreach(src ${SLUICE_CLI_TESTS})
    get_filename_component(name ${src} NAME_WE)
    add_test(NAME cli.${name} COMMAND bash ${src} $<TARGET_FILE:sluice_cli>)
    set_tests_properties(cli.${name} PROPERTIES TIMEOUT 300 LABELS cli
      ENVIRONMENT "SLUICE_WITH_LUA=$<BOOL:${SLUICE_WITH_LUA}>;SLUICE_WITH_IMAGES=$<BOOL:${SLUICE_WITH_IMAGES}>")
  endforeach()
  # 4 ranks under Open MPI's mpirun share SLR files through sl_open_files
  # (tests/mpi/run.sh builds its program against the shared libsluice).
  string(REPLACE ";" " " _sluice_mpi_cflags "${SLUICE_SAN_FLAGS}")
  add_test(NAME mpi.shards
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/mpi/run.sh
                   $<TARGET_FILE_DIR:sluice>)
  set_tests_properties(mpi.shards PROPERTIES TIMEOUT 300 LABELS mpi
    ENVIRONMENT "CC=${CMAKE_C_COMPILER};SLUICE_SAN_CFLAGS=${_sluice_mpi_cflags}")
  # The public header compiles as C++ (a trainer may well be C++).
  find_program(SLUICE_CXX_COMPILER NAMES c++ g++ clang++)
  if(SLUICE_CXX_COMPILER)
    add_test(NAME header.cplusplus
             COMMAND ${SLUICE_CXX_COMPILER} -std=c++11 -Wall -Wextra -Werror
                     -fsyntax-only -I${PROJECT_SOURCE_DIR}/include
                     ${PROJECT_SOURCE_DIR}/tests/header_cxx.cc)
  else()
    add_test(NAME header.cplusplus
             COMMAND sh -c "echo 'no C++ compiler found: make deps (build-essential)'; exit 1")
  endif()
  set_tests_properties(header.cplusplus PROPERTIES TIMEOUT 60 LABELS header)

  # The folders of src/ are layers (core < sync < readers < io < image < open
  # < {script, device}): no file includes or calls a higher one.  The calls
  # are read from the library's objects with nm.
  add_test(NAME layers
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/layers.sh
                   ${PROJECT_SOURCE_DIR}/src $<TARGET_OBJECTS:sluice_objects>
           COMMAND_EXPAND_LISTS)
  set_tests_properties(layers PROPERTIES TIMEOUT 300 LABELS header)

  # Every thread the library starts is the engine's (docs/ARCHITECTURE.md,
  # "Threads"): no other object calls pthread_create / sl__thread_start.
  add_test(NAME threads_started_by_the_engine
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/threads.sh
                   $<TARGET_OBJECTS:sluice_objects>
           COMMAND_EXPAND_LISTS)
  add_test(NAME threads_started_by_the_engine.self_test
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/threads.sh --self-test)
  set_tests_properties(threads_started_by_the_engine
                       threads_started_by_the_engine.self_test
                       PROPERTIES TIMEOUT 300 LABELS header)

  # libsluice.so exports the SL_API functions of sluice.h and, of the
  # internal sl__ ones, only those sluice/unstable.h names.
  add_test(NAME abi COMMAND bash ${PROJECT_SOURCE_DIR}/tests/abi.sh
                            ${PROJECT_SOURCE_DIR}/include
                            $<TARGET_FILE:sluice>)
  set_tests_properties(abi PROPERTIES TIMEOUT 60 LABELS header
    ENVIRONMENT "SLUICE_WITH_LUA=$<BOOL:${SLUICE_WITH_LUA}>")

endif()

if(SLUICE_BUILD_TESTS AND SLUICE_WITH_LUA)
  # A module loaded into the (uninstrumented) luajit binary needs the
  # sanitizer runtime preloaded: ASan/TSan must come first in the process.
  # LuaJIT's own allocations are not ours to leak-check, hence detect_leaks=0.
  set(SLUICE_LUA_SAN_ENV "")
  set(SLUICE_SAN_RUNTIME "")
  if(SLUICE_ASAN)
    set(SLUICE_SAN_RUNTIME libasan.so)
    list(APPEND SLUICE_LUA_SAN_ENV "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
  elseif(SLUICE_TSAN)
    set(SLUICE_SAN_RUNTIME libtsan.so)
  endif()
  if(SLUICE_SAN_RUNTIME)
    execute_process(
      COMMAND ${CMAKE_C_COMPILER} -print-file-name=${SLUICE_SAN_RUNTIME}
      OUTPUT_VARIABLE SLUICE_SAN_PRELOAD OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND SLUICE_LUA_SAN_ENV "LD_PRELOAD=${SLUICE_SAN_PRELOAD}")
  endif()

  # busted specs: one CTest test spec.NN-topic per spec/NN-topic_spec.lua, run
  # by busted under luajit from the source root (so source names in messages
  # are short: "spec/00-core_spec.lua:12").  LUA_PATH puts lua/ first, then
  # <build>/lua (sluice.library), then busted's own modules.
  find_program(SLUICE_LUAJIT_EXECUTABLE luajit)
  find_program(SLUICE_BUSTED_SCRIPT busted)
  set(_sluice_lua_path
      "${PROJECT_SOURCE_DIR}/lua/?.lua;${PROJECT_SOURCE_DIR}/lua/?/init.lua;${CMAKE_BINARY_DIR}/lua/?.lua;/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua;;")
  set(_sluice_lua_cpath ";;")
  # ENVIRONMENT is a list: escape the search paths' own semicolons.
  string(REPLACE ";" "\\;" _sluice_lua_path_esc "${_sluice_lua_path}")
  string(REPLACE ";" "\\;" _sluice_lua_cpath_esc "${_sluice_lua_cpath}")
  set(_sluice_spec_env "LUA_PATH=${_sluice_lua_path_esc}"
      "LUA_CPATH=${_sluice_lua_cpath_esc}" ${SLUICE_LUA_SAN_ENV})
  # The embedding tests (tests/test_pipeline.c) run scripts that require
  # "sluice": the same search paths as the specs (no sanitizer preload: the
  # test executable is instrumented itself).
  # They link the shared libsluice, as an embedding trainer does: the
  # scripts' FFI finds libsluice's exports among the process's symbols
  # (ffi.C), which a static copy inside the executable would not provide,
  # and cdef.lua would then load a second libsluice (two sets of error
  # slots).
  if(TARGET test_pipeline)
    set_property(TARGET test_pipeline PROPERTY LINK_LIBRARIES sluice ZLIB::ZLIB)
  endif()
  get_property(_sluice_pipeline_tests DIRECTORY PROPERTY TESTS)
  list(FILTER _sluice_pipeline_tests INCLUDE REGEX "^pipeline\\.")
  if(_sluice_pipeline_tests)
    set_tests_properties(${_sluice_pipeline_tests} PROPERTIES ENVIRONMENT
      "LUA_PATH=${_sluice_lua_path_esc};LUA_CPATH=${_sluice_lua_cpath_esc}")
  endif()
  # The C tests of the Lua host ship functions with sl__lua_ship, which runs
  # the Lua encoder (require "sluice.ship") in their own bare states: those
  # find lua/ through LUA_PATH too.
  get_property(_sluice_host_tests DIRECTORY PROPERTY TESTS)
  list(FILTER _sluice_host_tests INCLUDE REGEX
       "^(lua_ship|lua_stage|lua_faults|lua_alloc|shutdown)\\.")
  if(_sluice_host_tests)
    set_property(TEST ${_sluice_host_tests} APPEND PROPERTY ENVIRONMENT
      "LUA_PATH=${_sluice_lua_path_esc}")
  endif()
  # tests/test_resume_script.c, test_lua_flow.c and test_lua_alloc.c run the real
  # `sluice` package in worker states (ctx.rng, the parser, the flow
  # stages), whose FFI takes libsluice's functions from the executable
  # (ffi.C): the whole static library is linked in.
  foreach(_sluice_ffi_test test_resume_script test_lua_flow test_lua_alloc)
    if(TARGET ${_sluice_ffi_test})
      target_link_options(${_sluice_ffi_test} PRIVATE
        "LINKER:--whole-archive,$<TARGET_FILE:sluice_static>,--no-whole-archive")
    endif()
  endforeach()
  # spec/20-layouts: C's struct layouts, against the Lua declarations.
  add_executable(sluice_test_layouts ${PROJECT_SOURCE_DIR}/tests/layouts.c)
  target_include_directories(sluice_test_layouts PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
    ${SLUICE_DLPACK_INCLUDE_DIR})
  target_link_libraries(sluice_test_layouts PRIVATE PkgConfig::LUAJIT)
  file(GLOB SLUICE_SPECS CONFIGURE_DEPENDS
       RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/spec/*_spec.lua)
  foreach(spec ${SLUICE_SPECS})
    get_filename_component(topic ${spec} NAME)
    string(REGEX REPLACE "_spec\\.lua$" "" topic ${topic})
    if(SLUICE_LUAJIT_EXECUTABLE AND SLUICE_BUSTED_SCRIPT)
      add_test(NAME spec.${topic}
               COMMAND ${SLUICE_LUAJIT_EXECUTABLE} ${SLUICE_BUSTED_SCRIPT}
                       -o utfTerminal ${spec}
               WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    else()
      # Missing tools fail loudly rather than skip silently.
      add_test(NAME spec.${topic}
               COMMAND sh -c "echo 'luajit or busted not found: make deps'; exit 1")
    endif()
    set_tests_properties(spec.${topic} PROPERTIES
      TIMEOUT 900 LABELS spec ENVIRONMENT "${_sluice_spec_env}")
  endforeach()

  if(TEST spec.20-layouts)
    set_property(TEST spec.20-layouts APPEND PROPERTY ENVIRONMENT
                 "SLUICE_LAYOUTS=$<TARGET_FILE:sluice_test_layouts>")
  endif()

  # Tests that measure a speed-up or a rate need the cores to themselves:
  # CTest runs them alone even under -j.
  foreach(t lua_stage.cpu_heavy_map_scales_with_threads spec.10-performance
            spec.07-map)
    if(TEST ${t})
      set_tests_properties(${t} PROPERTIES RUN_SERIAL TRUE)
    endif()
  endforeach()

  # The shutdown stress test bounds each of its 1000 iterations with its own
  # watchdog (30 s); under TSan the whole run takes minutes on a small
  # machine, more than the default limit.
  if(TEST shutdown.destroy_at_random_points_never_hangs_or_leaks)
    set_tests_properties(shutdown.destroy_at_random_points_never_hangs_or_leaks
                         PROPERTIES TIMEOUT 1200)
  endif()

  # luacheck over every Lua file of the project (config: .luacheckrc).
  find_program(SLUICE_LUACHECK_EXECUTABLE luacheck)
  file(GLOB_RECURSE SLUICE_LUA_FILES CONFIGURE_DEPENDS
       RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/lua/*.lua ${PROJECT_SOURCE_DIR}/spec/*.lua
       ${PROJECT_SOURCE_DIR}/examples/*.lua)
  if(SLUICE_LUACHECK_EXECUTABLE)
    add_test(NAME luacheck
             COMMAND ${SLUICE_LUACHECK_EXECUTABLE} --no-color
                     --config ${PROJECT_SOURCE_DIR}/.luacheckrc
                     ${SLUICE_LUA_FILES}
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  else()
    add_test(NAME luacheck
             COMMAND sh -c "echo 'luacheck not found: make deps (lua-check)'; exit 1")
  endif()
  set_tests_properties(luacheck PROPERTIES TIMEOUT 120 LABELS lua)

  # Installs the build into a scratch prefix and builds C consumers against
  # it (pkg-config and find_package), then loads the installed facade.
  # Absolute install dirs ignore `cmake --install --prefix`, so the test can
  # only run with the (default) relative ones.
  set(_sluice_install_relocatable ON)
  foreach(dir CMAKE_INSTALL_LIBDIR SLUICE_INSTALL_LUA_CDIR SLUICE_INSTALL_LUA_DIR)
    if(IS_ABSOLUTE "${${dir}}")
      set(_sluice_install_relocatable OFF)
      message(STATUS "install.consumer not registered: ${dir} is absolute")
    endif()
  endforeach()
  if(SLUICE_INSTALL_DEVEL AND _sluice_install_relocatable)
    string(REPLACE ";" " " _sluice_san_cflags "${SLUICE_SAN_FLAGS}")
    add_test(NAME install.consumer
             COMMAND bash ${PROJECT_SOURCE_DIR}/tests/install/run.sh
                     ${CMAKE_BINARY_DIR} ${CMAKE_INSTALL_LIBDIR}
                     ${SLUICE_INSTALL_LUA_CDIR} ${SLUICE_INSTALL_LUA_DIR})
    set_tests_properties(install.consumer PROPERTIES
      TIMEOUT 300 LABELS install
      ENVIRONMENT "CC=${CMAKE_C_COMPILER};SLUICE_SAN_CFLAGS=${_sluice_san_cflags};SLUICE_SAN_PRELOAD=${SLUICE_SAN_PRELOAD};LUAJIT=${SLUICE_LUAJIT_EXECUTABLE}")
  endif()
endif()
