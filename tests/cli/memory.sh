# memory.sh - `sluice run --memory SIZE` (issue 27 item 1): the budget is
# set on the pipeline and the run yields every sample; --stats states the
# budget and each stage's bytes held and peak; sizes take K, M, G (powers
# of 1024); a bad size is a usage error (exit 2) naming the option; a
# budget too small for one sample ends the run (exit 1) naming the stage
# and the bytes; a script whose source has a budget already is an error.
# Without --memory: the default budget (50 % of the memory usable,
# SLUICE_MEMORY_LIMIT faking the container's limit), stated by --stats;
# --memory none or a script's :budget(false): none.
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
# without --memory: the default budget, 50 % of the memory usable
# (SLUICE_MEMORY_LIMIT standing for the container's limit), stated
SLUICE_MEMORY_LIMIT=3G sl run --stats "$S/range_batches.lua" 10 5
expect_rc 0 "run --stats without --memory"
contains "$OUT" "memory budget: 1536.0 MiB (default: 50 % of 3.0 GiB usable)"
sl run --stats "$S/range_batches.lua" 10 5
expect_rc 0 "run --stats without --memory nor SLUICE_MEMORY_LIMIT"
contains "$OUT" "(default: 50 % of "
# --memory none: no budget, no line
SLUICE_MEMORY_LIMIT=3G sl run --memory none --stats "$S/range_batches.lua" 10 5
expect_rc 0 "run --memory none"
not_contains "$OUT" "memory budget"
# an explicit size is not a default
SLUICE_MEMORY_LIMIT=3G sl run --memory 2M --stats "$S/range_batches.lua" 10 5
expect_rc 0 "run --memory 2M"
contains "$OUT" "memory budget: 2.0 MiB; held now"
# a malformed SLUICE_MEMORY_LIMIT is an error naming it
SLUICE_MEMORY_LIMIT=lots sl run "$S/range_batches.lua" 10 5
expect_rc 1 "run with SLUICE_MEMORY_LIMIT=lots"
contains "$ERR" "SLUICE_MEMORY_LIMIT: not a size >= 1 byte"
# a script that said :budget(false) gets no default
cat >"$TMP/nobudget.lua" <<'LUA'
local sluice = require "sluice"
return sluice.range(10):budget(false):batch(5)
LUA
sl run --stats "$TMP/nobudget.lua"
expect_rc 0 "run a script with :budget(false)"
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
sl run --memory none "$TMP/budgeted.lua"
expect_rc 1 "run --memory none over a budgeted script"
contains "$ERR" "already has a memory budget"
sl run --stats "$TMP/budgeted.lua"
expect_rc 0 "run a budgeted script"
contains "$OUT" "memory budget: 1.0 MiB"

sl run --help
expect_rc 0 "run --help"
contains "$OUT" "--memory SIZE"
contains "$OUT" "'none': no budget"
echo "memory: ok"
