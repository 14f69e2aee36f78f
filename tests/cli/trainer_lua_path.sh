# trainer_lua_path.sh - a C program embedding sluice finds sluice's Lua
# modules by itself (src/script/lua_path.c, docs/EMBEDDING.md "Where the
# Lua modules come from"): the demo's trainer run from the build tree with
# LUA_PATH and LUA_CPATH unset (issue 24, item 25; it failed "module
# 'sluice' not found"), with a LUA_PATH that does not reach sluice, and the
# README's own command (`build/examples/trainer/trainer --data build/data
# --epochs 1`, here with --limit to keep it short) from the build tree's
# parent.  A LUA_PATH that reaches a sluice of its own is used as it is.
. "$(dirname "$0")/lib.bash"
BUILD=$(cd "$(dirname "$SLUICE")/.." && pwd)
TRAINER=$BUILD/examples/trainer/trainer
[ -x "$TRAINER" ] || fail "no trainer at $TRAINER"

# The demo's shape (a Lua map on 2 threads, so worker states need sluice
# too), on synthetic data.
cat >synth.lua <<'LUA'
local sluice = require "sluice"
local split, _, batch = ...
local n = split == "train" and 600 or 100
return sluice.range(n):map(function(s)
  local img = sluice.tensor("f32", {784})
  for k = 0, 783 do img.data[k] = (k % 10 == s.i % 10) and 0.5 or 0 end
  s.image, s.label, s.i = img, s.i % 10, nil
  return s
end, {threads = 2}):batch(split == "train" and tonumber(batch) or 100)
LUA

run env -u LUA_PATH -u LUA_CPATH "$TRAINER" --script synth.lua --data . \
  --epochs 1
expect_rc 0 "trainer without LUA_PATH: $ERR"
contains "$OUT" "epoch=1 loss=" "trainer output"
# The epoch line reports the step with the pipeline running and over cached
# batches (issue 26: the loader's interference), as positive numbers.
printf '%s\n' "$OUT" | grep -Eq '^epoch=1 loss=[0-9.]+ test_acc=[0-9.]+ wait=[0-9.]+ step_us=[0-9]*[1-9][0-9]*\.[0-9] cached_step_us=[0-9]*[1-9][0-9]*\.[0-9] interference=[0-9]+\.[0-9]{2}$' ||
  fail "trainer epoch line without step_us / cached_step_us / interference: $OUT"
not_contains "$ERR" "not found" "trainer stderr"

# A LUA_PATH of the user's own modules only: sluice is still found, after
# them.
mkdir -p mine
printf 'return {answer = 42}\n' >mine/mymod.lua
cat >mine.lua <<'LUA'
assert(require("mymod").answer == 42, "the user's own module")
return assert(loadfile("synth.lua"))(...)
LUA
run env -u LUA_CPATH LUA_PATH="$TMP/mine/?.lua" "$TRAINER" --script mine.lua \
  --data . --epochs 1
expect_rc 0 "trainer with a LUA_PATH without sluice: $ERR"
contains "$OUT" "epoch=1 loss=" "trainer output"

# A LUA_PATH whose sluice is its own (here a stub that says so) wins: the
# runtime adds nothing to a path that finds sluice.
mkdir -p stub/sluice
printf 'error("the stub sluice on LUA_PATH was loaded")\n' \
  >stub/sluice/init.lua
run env -u LUA_CPATH LUA_PATH="$TMP/stub/?.lua;$TMP/stub/?/init.lua" \
  "$TRAINER" --script synth.lua --data . --epochs 1
expect_rc 1 "trainer with a stub sluice on LUA_PATH"
contains "$ERR" "the stub sluice on LUA_PATH was loaded" "trainer stderr"

# `sluice run` is the same embedding.
run env -u LUA_PATH -u LUA_CPATH "$SLUICE" run synth.lua train x 50
expect_rc 0 "sluice run without LUA_PATH: $ERR"

# The README's command, as written, from the build tree's parent (the demo's
# data in build/data when `make demo` or CTest's demo.short packed it, else
# packed here).
DEMO_DATA=$(demo_data "$BUILD") || exit 1
cd "$BUILD/.." || fail "cd $BUILD/.."
b=$(basename "$BUILD")
run env -u LUA_PATH -u LUA_CPATH "$b/examples/trainer/trainer" \
  --data "$DEMO_DATA" --epochs 1 --limit 20
expect_rc 0 "$b/examples/trainer/trainer --data $DEMO_DATA --epochs 1: $ERR"
contains "$OUT" "epoch=1 loss=" "trainer output"
echo "ok"
