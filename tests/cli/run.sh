# run.sh - `sluice run`: a Lua pipeline script with arguments, --epochs,
# --limit, a failing script (exit 1, the Lua message), --stats (the
# per-stage table naming the limiting stage), sample counts with and without
# a batch stage, the length and the progress line's share and ETA, and
# --help.  The scripts
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

# Samples are counted as samples: without a batch stage each item is one,
# whatever its shape (t10k: 10000 images of 28x28, not 280000 rows; text:
# lines, not bytes); with one, the samples in each batch (a ragged field's
# LoD sequences, not its rows).  A known length is printed.
need_data
cat >"$TMP/t10k.lua" <<'LUA'
local data = ...
return require("sluice").open("idx:" .. data .. "/t10k-images-idx3-ubyte.gz")
LUA
sl run "$TMP/t10k.lua" "$DATA"
expect_rc 0 "run t10k.lua (unbatched idx)"
contains "$OUT" "length: 10000 samples per epoch"
contains "$OUT" "total (1 epoch): 10000 batches, 10000 samples in "
printf 'one\ntwo two\nthree three three\n' >"$TMP/lines.txt"
cat >"$TMP/lines.lua" <<'LUA'
local path, batch = ...
local p = require("sluice").open("text:" .. path)
if batch then p = p:batch(tonumber(batch)) end
return p
LUA
sl run "$TMP/lines.lua" "$TMP/lines.txt"
expect_rc 0 "run lines.lua (unbatched text)"
contains "$OUT" "total (1 epoch): 3 batches, 3 samples in "
contains "$OUT" "length: not known (text"
sl run "$TMP/lines.lua" "$TMP/lines.txt" 2
expect_rc 0 "run lines.lua (text batched by 2: LoD)"
contains "$OUT" "total (1 epoch): 2 batches, 3 samples in "
sl run "$S/range_batches.lua" 100 8
contains "$OUT" "length: 13 batches per epoch"
cat >"$TMP/filtered.lua" <<'LUA'
return require("sluice").range(10):filter(function(s) return s.i % 2 == 0 end)
LUA
sl run "$TMP/filtered.lua"
expect_rc 0 "run filtered.lua"
contains "$OUT" "length: not known (filter: "
contains "$OUT" "total (1 epoch): 5 batches, 5 samples in "

# On a terminal the progress line shows the share done and an ETA when the
# length is known (it is drawn at the first batch, then every 0.2 s).
if command -v script >/dev/null; then
  run script -qec "'$SLUICE' run '$S/range_batches.lua' 100 8" /dev/null
  expect_rc 0 "run range_batches.lua on a terminal"
  contains "$OUT" "epoch 1: 1/13 batches (8%, ETA "
  contains "$OUT" " samples/s"
  run script -qec "'$SLUICE' run --limit 5 '$S/range_batches.lua' 100 8" \
    /dev/null
  contains "$OUT" "epoch 1: 1/5 batches (20%, ETA "
  run script -qec "'$SLUICE' run '$TMP/filtered.lua'" /dev/null
  contains "$OUT" "epoch 1: 1 batches, 1 samples"
  not_contains "$OUT" "ETA"
else
  fail "the util-linux 'script' command is missing (a terminal for the progress line)"
fi

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
