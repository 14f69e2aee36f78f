#!/usr/bin/env bash
# run.sh EXAMPLE CLI LUAJIT - CTest driver of the Lua examples
# (examples/lua/EXAMPLE.lua) on the real Fashion-MNIST t10k set.
#
# Packs the t10k idx files with the built CLI into a directory of its own
# (one per example, so tests run in parallel by `ctest -j` never share a
# file being written), then runs the example on it.  LUA_PATH and LUA_CPATH
# come from CTest (the spec tests' environment).  The examples check their
# own results and exit non-zero when a check fails.
set -u
example=$1 cli=$2 luajit=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
data=${SLUICE_FMNIST_DIR:-/usr/share/datasets/fashion-mnist} # override: tests of this script

fail() { echo "FAIL: $*" >&2; exit 1; }

for f in t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -f "$data/$f" ] ||
    fail "$data/$f is missing: install the dataset-fashion-mnist package"
done
[ -x "$cli" ] || fail "no sluice CLI at $cli (build it first)"
command -v "$luajit" >/dev/null 2>&1 || fail "luajit not found: make deps"

work="$PWD/example-data/$example"
rm -rf "$work" && mkdir -p "$work" || fail "cannot make $work"
"$cli" pack idx -q "$data/t10k-images-idx3-ubyte.gz" \
  "$data/t10k-labels-idx1-ubyte.gz" -o "$work/t10k.slr" || fail "sluice pack idx failed"

case $example in
  # Two epochs, so the cross-epoch check runs too (t10k: ~0.1 s each).
  fmnist_pipeline) args=(--epochs 2) ;;
  # Short timing (the identity check is the test; the speed-up is printed).
  crop_flip) args=(--passes 2 --runs 3) ;;
  *) fail "unknown example $example" ;;
esac

"$luajit" "$src/examples/lua/$example.lua" "$work/t10k.slr" "${args[@]}"
rc=$?
[ $rc -eq 0 ] || fail "$example exited with status $rc"
rm -rf "$work"
