# memory.sh - `sluice run --memory SIZE` (issue 27 item 1): the budget is
# set on the pipeline and the run yields every sample; --stats states the
# budget and each stage's bytes held and peak; sizes take K, M, G (powers
# of 1024); a bad size is a usage error (exit 2) naming the option; a
# budget too small for one sample ends the run (exit 1) naming the stage
# and the bytes; a script whose source has a budget already is an error.
# LUA_PATH / LUA_CPATH as run.sh.
. "$(dirname "$0")/lib.bash"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
S=$SRC/tests/scripts
BUILD=$(cd "$(dirname "$SLUICE")/.." && pwd)
export LUA_PATH="$SRC/lua/?.lua;$SRC/lua/?/init.lua;;" LUA_CPATH="$BUILD/lua/?.so;;"

sl run --memory 1M "$S/slow_map.lua" 400
expect_rc 0 "run --memory 1M"
contains "$OUT" "total (1 epoch): 40 batches, 400 samples"

sl run --memory 64K --stats "$S/slow_map.lua" 400
expect_rc 0 "run --memory 64K --stats"
contains "$OUT" "total (1 epoch): 40 batches, 400 samples"
contains "$OUT" "memory budget: 0.1 MiB; held now, peak:"
contains "$OUT" " prefetch 0.0/"
sl run --memory=2GiB --stats "$S/range_batches.lua" 10 5
expect_rc 0 "run --memory=2GiB"
contains "$OUT" "memory budget: 2048.0 MiB"
# no budget, no line
sl run --stats "$S/range_batches.lua" 10 5
expect_rc 0 "run --stats without --memory"
not_contains "$OUT" "memory budget"

for bad in 0 -5 lots 12X ""; do
  sl run --memory "$bad" "$S/range_batches.lua" 10 5
  expect_rc 2 "run --memory '$bad'"
  contains "$ERR" "--memory needs a size >= 1 byte"
done

# One sample ({i: i64, x: f32 [1000]}: 4008 bytes) larger than
# the budget.
cat >"$TMP/wide.lua" <<'LUA'
local sluice = require "sluice"
return sluice.range(100):map(function(s)
  s.x = sluice.tensor("f32", {1000})
  return s
end, {threads = 2}):prefetch(4)
LUA
sl run --memory 100 "$TMP/wide.lua"
expect_rc 1 "run --memory 100 with 4 KB samples"
contains "$ERR" "sluice: run: "
contains "$ERR" "needs 4008 bytes for one sample, the budget is 100 bytes"

# A script that set the budget on its source: --memory on top is refused.
cat >"$TMP/budgeted.lua" <<'LUA'
local sluice = require "sluice"
return sluice.range(10):budget("1MiB"):batch(5)
LUA
sl run --memory 1M "$TMP/budgeted.lua"
expect_rc 1 "run --memory over a budgeted script"
contains "$ERR" "already has a memory budget"
sl run --stats "$TMP/budgeted.lua"
expect_rc 0 "run a budgeted script"
contains "$OUT" "memory budget: 1.0 MiB"

sl run --help
expect_rc 0 "run --help"
contains "$OUT" "--memory SIZE"
echo "memory: ok"
