#!/usr/bin/env bash
# tests/threads.sh - every thread the library starts is started by the
# parallel-stage engine (CTest: threads_started_by_the_engine).
#
#   usage: threads.sh OBJECT...
#          threads.sh --self-test
#
# CMake passes the library's objects ($<TARGET_OBJECTS:sluice_objects>).
# An object that leaves pthread_create, thrd_create or sl__thread_start
# undefined (nm) starts threads; only these may:
#   src/core/threads.c   sl__thread_start, the one pthread_create (names
#                        the thread, fails as the stages' error);
#   src/sync/engine.c    the engine's workers (docs/ARCHITECTURE.md,
#                        "Threads": every stage's threads are a
#                        configuration of it).
# Outside the library, by design (not scanned here): the Python binding's
# puller (bindings/python/csrc/pipeline.c), which runs the pipeline off the
# interpreter's thread; the CLI starts none.
# Exit 0 when it holds; 1 with one line per other object.
set -euo pipefail

allowed() {
  case "$1" in
    */src/core/threads.c.o | */src/sync/engine.c.o) return 0 ;;
    *) return 1 ;;
  esac
}

check() {
  local bad=0 f sym
  # One nm for every object: "OBJECT: U SYMBOL" lines.
  while read -r f sym; do
    if ! allowed "$f"; then
      echo "threads: ${f##*/src/} calls $sym: start threads through the engine (src/sync/engine.h)"
      bad=1
    fi
  done < <(nm -A -u "$@" | awk '$NF ~ /^(pthread_create|thrd_create|sl__thread_start)(@.*)?$/ {
             f = $1; sub(/:$/, "", f); print f, $NF }')
  return $bad
}

self_test() {
  local t
  t=$(mktemp -d)
  trap 'rm -rf "$t"' RETURN
  command -v "${CC:-cc}" >/dev/null || { echo "self-test: no C compiler"; return 1; }
  mkdir -p "$t/src/sync" "$t/src/stages"
  printf '#include <pthread.h>\nvoid *f(void *a);\nint go(pthread_t *t) { return pthread_create(t, 0, f, 0); }\n' >"$t/p.c"
  printf 'int quiet(void) { return 1; }\n' >"$t/q.c"
  "${CC:-cc}" -c "$t/p.c" -o "$t/src/sync/engine.c.o"
  "${CC:-cc}" -c "$t/q.c" -o "$t/src/stages/quiet.c.o"
  check "$t/src/sync/engine.c.o" "$t/src/stages/quiet.c.o" >/dev/null ||
    { echo "self-test: the engine's own start was refused"; return 1; }
  cp "$t/src/sync/engine.c.o" "$t/src/stages/prefetch.c.o"
  check "$t/src/stages/prefetch.c.o" >/dev/null &&
    { echo "self-test: a stage's own pthread_create passed"; return 1; }
  echo "self-test: ok"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
  exit
fi
[ $# -ge 1 ] || { echo "usage: $0 OBJECT... | --self-test" >&2; exit 2; }
check "$@"
