# shard_sets.sh - `sluice verify` over a mixed shard set: two runs of
# `pack --shards 4` to the same name, whose shards 0-1 of the second run sit
# beside shards 2-3 of the first (as a failed re-pack could leave them).
# Every file is sound on its own, so each gets its ok line, but verify then
# names the odd file and exits 1.  A complete set, a subset of one and two
# sets of other names verify.
. "$(dirname "$0")/lib.bash"
seq 1 40 > a.txt
seq 101 140 > b.txt
mkdir old new mixed
sl pack text a.txt -o old/t.slr --shards 4 -q
expect_rc 0 "pack old"
sl pack text b.txt -o new/t.slr --shards 4 -q
expect_rc 0 "pack new"
cp new/t-00000-of-00004.slr new/t-00001-of-00004.slr mixed/
cp old/t-00002-of-00004.slr old/t-00003-of-00004.slr mixed/

sl verify mixed/t-0000?-of-00004.slr
expect_rc 1 "verify of a mixed set"
[ "$(printf '%s\n' "$OUT" | grep -c ': ok (')" -eq 4 ] ||
  fail "each sound file should still be reported ok"
contains "$ERR" "sluice: verify: mixed/t-00002-of-00004.slr is from another pack run (set "
contains "$ERR" "than mixed/t-00000-of-00004.slr (set "
contains "$ERR" "a mixed shard set (a failed re-pack?)"

# Listed in another order, the first file listed is the reference.
sl verify -q mixed/t-00003-of-00004.slr mixed/t-00000-of-00004.slr
expect_rc 1 "verify of one old and one new shard"
contains "$ERR" "sluice: verify: mixed/t-00000-of-00004.slr is from another pack run"

sl verify -q old/t-0000?-of-00004.slr
expect_rc 0 "verify of a complete set"
sl verify -q mixed/t-00000-of-00004.slr mixed/t-00001-of-00004.slr
expect_rc 0 "verify of part of one set"
sl pack text a.txt -o other/v.slr --shards 2 -q
expect_rc 0 "pack other"
sl verify -q old/t-0000?-of-00004.slr other/v-0000?-of-00002.slr
expect_rc 0 "verify of two sets of other names"
echo "shard_sets: ok"
