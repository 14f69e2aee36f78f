#!/usr/bin/env bash
# fuzz/run.sh BUILD_DIR SECONDS [TARGET...] - runs each libFuzzer target of
# BUILD_DIR (a SLUICE_FUZZ build, see `make fuzz`) for SECONDS, starting from
# the committed corpus fuzz/corpus/<target>/ (read-only: new inputs go to
# BUILD_DIR/fuzz-work/corpus/<target>/).  A finding stops that target, is
# saved as BUILD_DIR/fuzz-work/artifacts/<target>-crash-*, and makes this
# script fail after the other targets have run; add the input to
# fuzz/corpus/<target>/ as a regression once the bug is fixed.  Prints each
# target's execution count (libFuzzer's final stats).
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
secs=${2:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
src=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$src"/fuzz_*.c; do
    t=$(basename "$f" .c)
    targets+=("${t#fuzz_}")
  done
fi
work="$build/fuzz-work"
mkdir -p "$work/artifacts" "$work/logs"
failed=()
for t in "${targets[@]}"; do
  exe="$build/fuzz/fuzz_$t"
  if [ ! -x "$exe" ]; then
    echo "fuzz: $exe is missing (build it: make fuzz-build)" >&2
    failed+=("$t(missing)")
    continue
  fi
  mkdir -p "$work/corpus/$t"
  log="$work/logs/$t.log"
  echo "fuzz: $t for ${secs}s (log: $log)"
  # -timeout: one input taking 10 s is a hang, a finding like a crash.
  "$exe" -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$t-" \
    "$work/corpus/$t" "$src/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: $t: ${runs:-?} executions, exit $rc"
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    grep -E "ERROR|FUZZ FINDING|SUMMARY|Test unit written" "$log" | head -20
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (artifacts in $work/artifacts)" >&2
  exit 1
fi
echo "fuzz: no findings"
