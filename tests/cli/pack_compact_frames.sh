# pack_compact_frames.sh - `sluice pack ... --compact-frames`: compact
# framed chunks (codec 3, required feature bit 0x8; docs/FORMAT.md) that
# verify, read back like whole-chunk ones, are smaller than codec-2 frames
# and are shown by `inspect`.
. "$(dirname "$0")/lib.bash"

for i in $(seq 1 3000); do
  printf 'Package: lib%d-dev Description: development files for the %s library, version %d\n' \
    "$i" "$(( i % 17 ))th" "$(( i % 5 ))"
done > lines.txt

sl pack text lines.txt -o whole.slr -q
expect_rc 0 "pack text (whole chunks)"
sl pack text lines.txt -o framed.slr --dict auto --dict-sample 64K \
  --dict-size 4K --frame-records 8 --records-per-chunk 1000 -q
expect_rc 0 "pack --dict auto (codec 2)"
sl pack text lines.txt -o compact.slr --dict auto --dict-sample 64K \
  --dict-size 4K --frame-records 8 --records-per-chunk 1000 \
  --compact-frames -q
expect_rc 0 "pack --dict auto --compact-frames"
sl verify compact.slr
expect_rc 0 "verify a compact framed file"

sl cat --json whole.slr
printf '%s\n' "$OUT" > whole.json
sl cat --json compact.slr
printf '%s\n' "$OUT" > compact.json
cmp -s whole.json compact.json || fail "compact records differ from whole ones"

# 375 frames, ~8 bytes less each.
a=$(stat -c %s framed.slr)
b=$(stat -c %s compact.slr)
[ $(( a - b )) -ge 2000 ] || fail "compact file $b bytes, codec 2 $a"

sl inspect compact.slr
expect_rc 0 "inspect compact"
contains "$OUT" "records per frame"
contains "$OUT" "frame table: compact (codec 3"
sl inspect --json compact.slr
contains "$OUT" '"frame_records":8,"frame_table":"compact"}'
sl inspect framed.slr
case "$OUT" in *"frame table: compact"*) fail "codec 2 shown compact" ;; esac

# Alone it implies frames (about 4 KiB each).
sl pack text lines.txt -o alone.slr --compact-frames -q
expect_rc 0 "pack --compact-frames alone"
sl inspect --json alone.slr
contains "$OUT" '"frame_table":"compact"'
sl cat --json alone.slr
printf '%s\n' "$OUT" > alone.json
cmp -s whole.json alone.json || fail "compact records (no dict) differ"

mkdir -p imgs
sl pack images imgs -o x.tar --format wds --compact-frames
expect_rc 2 "--compact-frames with --format wds"
contains "$ERR" "--compact-frames are for SLR output"
sl pack --help
contains "$OUT" "--compact-frames"
echo "pack_compact_frames: ok"
