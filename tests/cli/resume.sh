# resume.sh - `sluice run --save-state FILE --stop-after N` and `--resume
# FILE` (docs/RESUME.md): a run of 3 epochs cut at several points (mid
# batch, mid epoch, at and just after an epoch's end, in a later epoch, in
# two cuts), each piece a new process, prints exactly the digests of the
# uninterrupted run, and the totals of the last piece are the whole run's;
# the state file is written atomically (no temporary left, a failed write
# leaves the old file whole); a foreign, corrupt, truncated or other
# pipeline's state file is refused with exit status 1 and a message saying
# which.  The scripts require "sluice": LUA_PATH points at the source lua/.
. "$(dirname "$0")/lib.bash"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "$(dirname "$SLUICE")/.." && pwd)
export LUA_PATH="$SRC/lua/?.lua;$SRC/lua/?/init.lua;;"
export LUA_CPATH="$BUILD/lua/?.so;;"

# 100 samples, shuffled through a window of 16 (its seed: the argument),
# batches of 8 (the last one of 4), a prefetch holding batches ahead.
cat >shuffled.lua <<'EOF'
local sluice = require "sluice"
local seed = tonumber((...)) or 5
return sluice.range(100):shuffle(16, {seed = seed}):batch(8):prefetch(2)
EOF

digests() { printf '%s\n' "$1" | grep '^digest '; }

# check_cuts SCRIPT EPOCHS TOTAL CUT... : the run in pieces cut after each
# CUT samples (one process each) prints the uninterrupted run's digests.
check_cuts() {
  local script=$1 epochs=$2 total=$3
  shift 3
  sl run --epochs "$epochs" --digest "$script"
  expect_rc 0 "uninterrupted run of $script"
  local whole pieces="" cut opt
  whole=$(digests "$OUT")
  [ -n "$whole" ] || fail "no digest lines"
  rm -f state.bin
  for cut in "$@" ""; do
    opt=()
    [ -e state.bin ] && opt+=(--resume state.bin)
    if [ -n "$cut" ]; then
      opt+=(--stop-after "$cut" --save-state state.bin)
    fi
    sl run --epochs "$epochs" --digest "${opt[@]}" "$script"
    expect_rc 0 "run ${opt[*]} $script"
    [ -n "$cut" ] && contains "$OUT" "state: state.bin ("
    pieces+=$(digests "$OUT")$'\n'
    ls state.bin.tmp-* >/dev/null 2>&1 && fail "a temporary state file is left"
  done
  [ "$(printf '%s' "$pieces" | grep -c .)" -eq "$(printf '%s\n' "$whole" | grep -c .)" ] ||
    fail "cuts $*: $(printf '%s' "$pieces" | grep -c .) digests in pieces," \
      "$(printf '%s\n' "$whole" | grep -c .) uninterrupted"
  [ "$(printf '%s' "$pieces" | grep .)" = "$whole" ] ||
    fail "cuts $*: the pieces' digests differ from the uninterrupted run's" \
      "($(diff <(printf '%s\n' "$whole") <(printf '%s' "$pieces" | grep .) | head -5))"
  contains "$(printf '%s\n' "$OUT" | grep '^total ')" \
    "total ($epochs epochs): " "the last piece's total"
  contains "$(printf '%s\n' "$OUT" | grep '^total ')" \
    " batches, $total samples" "the last piece's total"
}

# One cut each: the first batch, mid batch (50: the batch holding it ends
# at 56), just before an epoch's end (96), at it (100), just after (101),
# in the last epoch (250), at the very end (300).
for cut in 1 50 96 100 101 250 300; do
  check_cuts shuffled.lua 3 300 "$cut"
done
# Several cuts in one run: each piece resumes the previous one's state.
check_cuts shuffled.lua 3 300 7 99 100 180 299

# Without a batch stage every item is one sample.
cat >plain.lua <<'EOF'
local sluice = require "sluice"
return sluice.range(30):shuffle(8, {seed = 3}):prefetch(3)
EOF
check_cuts plain.lua 2 60 1 29 30 31 59

# A resumed run keeps the whole run's counters: --epochs 3 is 3 in all, the
# resumed epoch says so and counts its samples from its start.
sl run --epochs 3 --stop-after 130 --save-state st.bin shuffled.lua
expect_rc 0 "stop after 130"
contains "$OUT" "epoch 2 (--stop-after reached): 4 batches, 32 samples"
contains "$OUT" "state: st.bin ("
sl run --epochs 3 --resume st.bin shuffled.lua
expect_rc 0 "resume at 132"
contains "$OUT" "resumed: st.bin: epoch 2, 4 batches, 32 samples into it, 132 samples of the run"
contains "$OUT" "epoch 2 (resumed): 13 batches, 100 samples"
contains "$OUT" "epoch 3: 13 batches, 100 samples in "
contains "$OUT" "total (3 epochs): 39 batches, 300 samples (22 batches, 168 samples in this run) in "
contains "$OUT" "epoch 2 (resumed): 13 batches, 100 samples (9 batches, 68 samples in this run) in "
not_contains "$OUT" "epoch 1:"
# --limit counts the whole run's batches too.
sl run --epochs 3 --limit 20 --resume st.bin shuffled.lua
expect_rc 0 "resume with --limit 20"
contains "$OUT" "epoch 2 (resumed) (--limit reached): 7 batches"
contains "$OUT" "total (2 epochs): 20 batches"
# Saved after the last epoch ended: resuming with more epochs goes on.
sl run --epochs 1 --save-state end.bin shuffled.lua
expect_rc 0 "save at the end"
contains "$OUT" "state: end.bin ("
contains "$OUT" "epoch 1 ended, 100 samples of the run"
sl run --epochs 2 --digest --resume end.bin shuffled.lua
expect_rc 0 "resume after the end"
contains "$OUT" "epoch 2: 13 batches, 100 samples"
not_contains "$OUT" "epoch 1:"
second=$(digests "$OUT")
sl run --epochs 2 --digest shuffled.lua
expect_rc 0
[ "$second" = "$(digests "$OUT" | grep '^digest 2 ')" ] ||
  fail "epoch 2 after resuming at the end of epoch 1 differs"

# --- refused state files: exit 1, the file named, nothing run -------------
sl run --epochs 3 --stop-after 40 --save-state good.bin shuffled.lua
expect_rc 0
refused() { # what, needle, file, [script args...]
  local what=$1 needle=$2 file=$3
  shift 3
  sl run --epochs 3 --resume "$file" "${@:-shuffled.lua}"
  expect_rc 1 "$what"
  contains "$ERR" "sluice: run: --resume $file: " "$what"
  contains "$ERR" "$needle" "$what"
  not_contains "$OUT" "epoch 1" "$what"
}
printf 'hello, not a state' >foreign.bin
refused "a foreign file" "not a run state of \`sluice run --save-state\`" foreign.bin
: >empty.bin
refused "an empty file" "not a run state" empty.bin
size=$(wc -c <good.bin)
head -c $((size - 9)) good.bin >short.bin
refused "a truncated file" "cut short" short.bin
head -c 40 good.bin >tiny.bin
refused "a file cut inside its header" "cut short" tiny.bin
cp good.bin flipped.bin
printf '\x55' | dd of=flipped.bin bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
refused "a flipped byte" "checksum mismatch" flipped.bin
cp good.bin version.bin
printf '\x07' | dd of=version.bin bs=1 seek=8 conv=notrunc 2>/dev/null
refused "another version" "run state version 7" version.bin
# Another pipeline: another seed, or another script.
refused "another seed" "shuffle" good.bin shuffled.lua 6
refused "another pipeline" "state" good.bin plain.lua
sl run --resume nothere.bin shuffled.lua
expect_rc 1 "a missing state file"
contains "$ERR" "cannot open nothere.bin"

# --- writing: atomic, a failure leaves the old file --------------------------
cp good.bin keep.bin
mkdir ro && chmod 555 ro
if [ ! -w ro ]; then # root writes anywhere: nothing to test then
  sl run --stop-after 10 --save-state ro/x.bin shuffled.lua
  expect_rc 1 "an unwritable folder"
  contains "$ERR" "cannot create ro/x.bin.tmp-"
fi
sl run --stop-after 10 --save-state nodir/x.bin shuffled.lua
expect_rc 1 "a missing folder"
contains "$ERR" "cannot create nodir/x.bin.tmp-"
cmp -s good.bin keep.bin || fail "good.bin changed"
# Overwriting a state replaces it whole.
sl run --epochs 3 --stop-after 200 --save-state keep.bin shuffled.lua
expect_rc 0
cmp -s good.bin keep.bin && fail "keep.bin was not replaced"
sl run --epochs 3 --resume keep.bin shuffled.lua
expect_rc 0 "resume the replaced state"
contains "$OUT" "samples of the run"
ls ./*.tmp-* >/dev/null 2>&1 && fail "temporaries left: $(ls ./*.tmp-*)"

# The state file gets the mode a plain create would (umask 022: 644).
(umask 022 && "$SLUICE" run --stop-after 10 --save-state mode.bin shuffled.lua >/dev/null) ||
  fail "save under umask 022"
[ "$(stat -c %a mode.bin)" = 644 ] || fail "mode.bin is $(stat -c %a mode.bin), not 644"

# Usage errors: exit 2.
sl run --stop-after 0 shuffled.lua
expect_rc 2 "--stop-after 0"
contains "$ERR" "--stop-after needs a whole number >= 1"
sl run --save-state "" shuffled.lua
expect_rc 2 "--save-state ''"
sl run --help
expect_rc 0
contains "$OUT" "--save-state FILE"
contains "$OUT" "--resume FILE"
contains "$OUT" "--stop-after N"
contains "$OUT" "--digest"
echo "resume: ok"
