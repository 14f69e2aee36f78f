# run.sh - `sluice run`: a Lua pipeline script with arguments, --epochs,
# --limit, a failing script (exit 1, the Lua message), --stats (the
# per-stage table naming the limiting stage) and --help.  The scripts
# require "sluice": LUA_PATH / LUA_CPATH point at the source lua/ and the
# build's lua/ (beside tools/).
. "$(dirname "$0")/lib.bash"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "$(dirname "$SLUICE")/.." && pwd)
export LUA_PATH="$SRC/lua/?.lua;$SRC/lua/?/init.lua;;"
export LUA_CPATH="$BUILD/lua/?.so;;"
S=$SRC/tests/scripts

sl run "$S/range_batches.lua" 100 8
expect_rc 0 "run range_batches.lua 100 8"
contains "$OUT" "yields {i: i64[-1]}"
contains "$OUT" "epoch 1: 13 batches, 100 samples in "
contains "$OUT" "total (1 epoch): 13 batches, 100 samples in "
contains "$OUT" " samples/s, "
contains "$OUT" " batches/s"
[ -z "$ERR" ] || fail "run wrote to stderr (not a terminal): $ERR"

# Options before the script; everything after it is the script's.
sl run --epochs 2 "$S/range_batches.lua" 10 5
expect_rc 0 "run --epochs 2"
contains "$OUT" "epoch 2: 2 batches, 10 samples"
contains "$OUT" "total (2 epochs): 4 batches, 20 samples"
sl run -e 3 --limit 5 "$S/range_batches.lua" 10 4
expect_rc 0 "run --limit 5 over 3 epochs"
contains "$OUT" "epoch 1: 3 batches, 10 samples"
contains "$OUT" "epoch 2 (--limit reached): 2 batches, 8 samples"
contains "$OUT" "total (2 epochs): 5 batches, 18 samples"
not_contains "$OUT" "epoch 3"

# Arguments reach the script as ... and arg.
sl run "$S/args_echo.lua" alpha "two words"
expect_rc 0 "run args_echo.lua"
contains "$OUT" "total (1 epoch): 2 batches, 2 samples"
sl run "$S/args_echo.lua" --epochs 9 -- x
expect_rc 0 "run args_echo.lua with options after the script"
contains "$OUT" "total (1 epoch): 4 batches, 4 samples"

# Failures: exit 1, "sluice: run: <message>".
sl run "$S/raises.lua"
expect_rc 1 "a script raising an error"
contains "$ERR" "sluice: run: pipeline script ("
contains "$ERR" "need at least 10 samples"
contains "$ERR" "stack traceback:"
sl run "$S/map_fails.lua"
expect_rc 1 "a Lua map failing during iteration"
contains "$ERR" "sluice: run: map ("
contains "$ERR" "bad sample 5"
sl run "$S/returns_number.lua"
expect_rc 1 "a script returning a number"
contains "$ERR" "not a pipeline"
sl run nothere.lua
expect_rc 1 "a missing script"
contains "$ERR" "sluice: run: pipeline script nothere.lua: cannot open"

# --stats: one line per stage, indented upstream, and the verdict.
sl run --stats "$S/slow_map.lua" 400
expect_rc 0 "run --stats slow_map.lua"
contains "$OUT" "total (1 epoch): 40 batches, 400 samples"
contains "$OUT" "stage "
contains "$OUT" "prefetch "
contains "$OUT" "  batch "
contains "$OUT" "    map "
contains "$OUT" "      range "
contains "$OUT" "limiting stage: map (busy "
sl run --stats --epochs 2 "$S/range_batches.lua" 10 5
expect_rc 0 "run --stats over 2 epochs"
contains "$OUT" "  range "

# Usage errors and --help.
for bad in "" "--epochs 0 x.lua" "--limit x x.lua" "--bogus x.lua"; do
  sl run $bad
  expect_rc 2 "sluice run $bad"
  contains "$ERR" "Usage:"
done
for h in "run --help" "help run" "run -h"; do
  sl $h
  expect_rc 0 "sluice $h"
  contains "$OUT" "sluice run [--epochs N | --limit N] SCRIPT [ARGS...]"
done
echo "run: ok"
