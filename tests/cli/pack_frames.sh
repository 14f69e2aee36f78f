# pack_frames.sh - `sluice pack ... --frame-records N --dict auto|FILE`:
# framed SLR 1.1 files that verify, read back like whole-chunk ones, show
# their frames and dictionary in `inspect`, and bad options refused.
. "$(dirname "$0")/lib.bash"

# 3000 description-like lines (~ 100 bytes each).
for i in $(seq 1 3000); do
  printf 'Package: lib%d-dev Description: development files for the %s library, version %d\n' \
    "$i" "$(( i % 17 ))th" "$(( i % 5 ))"
done > lines.txt

sl pack text lines.txt -o whole.slr -q
expect_rc 0 "pack text (whole chunks)"
sl pack text lines.txt -o framed.slr --dict auto --dict-sample 64K \
  --dict-size 4K --records-per-chunk 1000 -q
expect_rc 0 "pack text --dict auto"
sl verify framed.slr
expect_rc 0 "verify a framed file"

# The same records as the whole-chunk file.
sl cat --json whole.slr
printf '%s\n' "$OUT" > whole.json
sl cat --json framed.slr
printf '%s\n' "$OUT" > framed.json
cmp -s whole.json framed.json || fail "framed records differ from whole ones"

sl inspect framed.slr
expect_rc 0 "inspect framed"
contains "$OUT" "frames:"
contains "$OUT" "per chunk;"
contains "$OUT" "records per frame"
contains "$OUT" "dictionary: "
contains "$OUT" "counting the dictionary"
sl inspect --json framed.slr
contains "$OUT" '"chunks":3,'
contains "$OUT" '"frame_records":'
sl inspect --json whole.slr
contains "$OUT" '"dict_bytes":0,'

# A given dictionary file, and fixed frames without one.
printf 'Package: lib Description: development files for the library' > d.dict
sl pack text lines.txt -o given.slr --dict d.dict --frame-records 3 -q
expect_rc 0 "pack --dict FILE"
sl inspect --json given.slr
contains "$OUT" '"dict_bytes":59,'
contains "$OUT" '"frame_records":3}'
sl pack text lines.txt -o plain.slr --frame-records 7 -q
expect_rc 0 "pack --frame-records without a dictionary"
sl inspect --json plain.slr
contains "$OUT" '"dict_bytes":0,'
contains "$OUT" '"frame_records":7}'
sl cat --json given.slr
printf '%s\n' "$OUT" > given.json
cmp -s whole.json given.json || fail "given-dictionary records differ"

# Bad options.
sl pack text lines.txt -o x.slr --frame-records 0
expect_rc 2 "--frame-records 0"
contains "$ERR" "--frame-records wants a count >= 1"
: > empty.dict
sl pack text lines.txt -o x.slr --dict empty.dict
expect_rc 2 "--dict with an empty file"
contains "$ERR" "--dict is auto or a dictionary file"
sl pack text lines.txt -o x.slr --dict missing.dict
expect_rc 2 "--dict with a missing file"
contains "$ERR" "missing.dict"
sl pack text lines.txt -o x.slr --dict-size 100
expect_rc 2 "--dict-size too small"
contains "$ERR" "--dict-size wants 256..16M bytes"
sl pack --help
contains "$OUT" "--dict auto|FILE"
contains "$OUT" "--frame-records N"
echo "pack_frames: ok"
