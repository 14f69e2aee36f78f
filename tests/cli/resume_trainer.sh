# resume_trainer.sh - the demo's trainer (examples/trainer) with
# --save-state FILE / --stop-after N / --resume FILE (docs/RESUME.md): a run
# of 3 epochs stopped after N training steps and resumed in a new process
# (once, or several times in a chain) prints the uninterrupted run's epoch
# lines (loss and test accuracy; wait is a timing), a checkpoint saved at
# the end resumes into a 4th epoch equal to an uninterrupted 4-epoch run's,
# and foreign, corrupt and other-pipeline checkpoints are refused (exit 1).
# A synthetic pipeline script with the demo's shape (shuffle, a Lua map on 2
# threads, batch) keeps it quick; the demo's own script
# (examples/fashion_mnist.lua over the build's data/) runs last.
. "$(dirname "$0")/lib.bash"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "$(dirname "$SLUICE")/.." && pwd)
export LUA_PATH="$SRC/lua/?.lua;$SRC/lua/?/init.lua;$BUILD/lua/?.lua;;"
TRAINER=$BUILD/examples/trainer/trainer
[ -x "$TRAINER" ] || fail "no trainer at $TRAINER"

# SPLIT DATA BATCH SEED, as fashion_mnist.lua: 3000 training samples (24
# batches of 128, the last of 56), 500 test samples; label i % 10, an image
# that shows it.
cat >synth.lua <<'EOF'
local sluice = require "sluice"
local split, _, batch, seed = ...
local n = split == "train" and 3000 or 500
local p = sluice.range(n)
if split == "train" then p = p:shuffle(256, {seed = tonumber(seed) or 42}) end
return p:map(function(s)
  local img = sluice.tensor("f32", {784})
  local d, i = img.data, s.i
  for k = 0, 783 do
    d[k] = (k % 10 == i % 10 and 0.5 or 0) + ((i * 7 + k * 13) % 101) / 400
  end
  s.image, s.label, s.i = img, i % 10, nil
  return s
end, {threads = 2}):batch(split == "train" and tonumber(batch) or 100)
EOF

epochs_of() { printf '%s\n' "$1" | grep '^epoch=' | sed 's/ wait=.*//'; }

tr() { run "$TRAINER" --script synth.lua --data . "$@"; }

tr --epochs 3
expect_rc 0 "uninterrupted"
WHOLE=$(epochs_of "$OUT")
[ "$(printf '%s\n' "$WHOLE" | grep -c .)" -eq 3 ] || fail "3 epoch lines"

# check_cuts STEP... : the run stopped after each STEP (in all) and resumed.
check_cuts() {
  local got="" cut opt
  rm -f ck.bin
  for cut in "$@" ""; do
    opt=()
    [ -e ck.bin ] && opt+=(--resume ck.bin)
    [ -n "$cut" ] && opt+=(--stop-after "$cut" --save-state ck.bin)
    tr --epochs 3 "${opt[@]}"
    expect_rc 0 "trainer ${opt[*]}"
    [ -n "$cut" ] && contains "$OUT" "checkpoint: ck.bin ("
    [ -e ck.bin ] && [ -n "${opt[1]:-}" ] && [ "${opt[0]}" = --resume ] &&
      contains "$OUT" "resumed: ck.bin at epoch "
    got+=$(epochs_of "$OUT")$'\n'
    ls ck.bin.tmp-* >/dev/null 2>&1 && fail "a temporary checkpoint is left"
  done
  [ "$(printf '%s' "$got" | grep .)" = "$WHOLE" ] ||
    fail "cuts $*: epoch lines differ:" \
      "$(diff <(printf '%s\n' "$WHOLE") <(printf '%s' "$got" | grep .))"
}
# The first step, mid epoch, an epoch's last step, the next, the last one.
for cut in 1 10 24 25 50 71; do check_cuts "$cut"; done
check_cuts 5 24 30 48 60

# A checkpoint at the end of the run: a 4th epoch as an uninterrupted run's.
tr --epochs 3 --save-state end.bin
expect_rc 0 "save at the end"
contains "$OUT" "checkpoint: end.bin ("
tr --epochs 4 --resume end.bin
expect_rc 0 "resume for a 4th epoch"
contains "$OUT" "resumed: end.bin at epoch 4 (its start)"
fourth=$(epochs_of "$OUT")
tr --epochs 4
expect_rc 0
[ "$fourth" = "$(epochs_of "$OUT" | grep '^epoch=4 ')" ] ||
  fail "epoch 4 after a resume: $fourth, uninterrupted: $(epochs_of "$OUT")"

# Refused: exit 1, the file named, no epoch run.
tr --epochs 3 --stop-after 5 --save-state good.bin
expect_rc 0
printf 'not a checkpoint' >foreign.bin
tr --resume foreign.bin
expect_rc 1 "a foreign file"
contains "$ERR" "trainer: --resume foreign.bin: not a trainer checkpoint"
not_contains "$OUT" "epoch="
size=$(wc -c <good.bin)
cp good.bin flipped.bin
printf '\x42' | dd of=flipped.bin bs=1 seek=$((size / 3)) conv=notrunc 2>/dev/null
tr --resume flipped.bin
expect_rc 1 "a flipped byte"
contains "$ERR" "checksum mismatch"
head -c $((size - 10)) good.bin >short.bin
tr --resume short.bin
expect_rc 1 "a truncated checkpoint"
contains "$ERR" "cut short"
tr --resume good.bin --seed 7
expect_rc 1 "another seed"
contains "$ERR" "shuffle"
contains "$ERR" "seed=42"
tr --resume nothere.bin
expect_rc 1 "a missing checkpoint"
contains "$ERR" "trainer: --resume nothere.bin: "

# The demo's own script over Fashion-MNIST (what `make demo` runs): the
# build's data/ (packed by `make demo` and CTest's demo.short), else packed
# here.  One cut in its first epoch, 2 epochs of at most 100 steps.
DEMO_DATA=$(demo_data "$BUILD") || exit 1
demo() { run "$TRAINER" --data "$DEMO_DATA" --epochs 2 --limit 100 "$@"; }
demo
expect_rc 0 "the demo"
want=$(epochs_of "$OUT")
demo --stop-after 60 --save-state demo.bin
expect_rc 0 "the demo, stopped"
contains "$OUT" "checkpoint: demo.bin ("
: >plain.file # the checkpoint's mode is a plain create's (not mkstemp's 0600)
[ "$(stat -c %a demo.bin)" = "$(stat -c %a plain.file)" ] ||
  fail "demo.bin has mode $(stat -c %a demo.bin)"
demo --resume demo.bin
expect_rc 0 "the demo, resumed"
[ "$(epochs_of "$OUT")" = "$want" ] ||
  fail "the demo resumed: $(epochs_of "$OUT"), uninterrupted: $want"
echo "resume_trainer: ok"
