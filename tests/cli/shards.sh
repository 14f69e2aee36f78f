# shards.sh - `sluice pack --shards K` in both modes on t10k: file names,
# record counts, and the shards together holding the input in order.
. "$(dirname "$0")/lib.bash"
need_data
t10k_labels > all.txt
IMG="$DATA/t10k-images-idx3-ubyte.gz"
LAB="$DATA/t10k-labels-idx1-ubyte.gz"

records() {
  "$SLUICE" inspect --json "$1" | sed 's/.*"records":\([0-9]*\),.*/\1/'
}

# Round-robin (the default): record i is in shard i mod 4, at i div 4.
sl pack idx "$IMG" "$LAB" -o rr.slr --shards 4
expect_rc 0 "pack --shards 4"
[ ! -e rr.slr ] || fail "rr.slr exists: shards only"
for s in 0 1 2 3; do
  f=rr-0000$s-of-00004.slr
  [ -f "$f" ] || fail "missing shard $f ($(ls))"
  [ "$(records "$f")" -eq 2500 ] || fail "$f: expected 2500 records"
  slr_labels "$f" > got.txt
  awk -v s=$s '(NR - 1) % 4 == s' all.txt > want.txt
  cmp -s got.txt want.txt || fail "$f: labels are not records $s, $s+4, ..."
done
sl verify rr-0000?-of-00004.slr
expect_rc 0 "verify the round-robin shards"

# Contiguous: consecutive ranges, concatenated they are the input.
sl pack idx "$IMG" "$LAB" -o ct.slr --shards 4 --shard-mode contiguous
expect_rc 0 "pack --shard-mode contiguous"
: > cat.txt
for s in 0 1 2 3; do
  f=ct-0000$s-of-00004.slr
  [ "$(records "$f")" -eq 2500 ] || fail "$f: expected 2500 records"
  slr_labels "$f" >> cat.txt
done
cmp -s cat.txt all.txt || fail "contiguous shards concatenated differ from the input"

# Uneven: 10000 = 3334 + 3333 + 3333, the larger shard first.
sl pack idx "$IMG" "$LAB" -o odd --shards 3 --shard-mode=contiguous
expect_rc 0 "pack --shards 3 contiguous"
[ "$(records odd-00000-of-00003.slr)" -eq 3334 ] || fail "shard 0 of 3: 3334"
[ "$(records odd-00001-of-00003.slr)" -eq 3333 ] || fail "shard 1 of 3: 3333"
[ "$(records odd-00002-of-00003.slr)" -eq 3333 ] || fail "shard 2 of 3: 3333"
: > cat.txt
for s in 0 1 2; do slr_labels odd-0000$s-of-00003.slr >> cat.txt; done
cmp -s cat.txt all.txt || fail "3 contiguous shards differ from the input"
[ "$(ls -A | grep -c tmp)" -eq 0 ] || fail "a temporary file was left: $(ls -A)"
echo "shards: ok"
