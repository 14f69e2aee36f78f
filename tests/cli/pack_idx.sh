# pack_idx.sh - `sluice pack idx` on the real Fashion-MNIST t10k set, then
# inspect (text and --json), verify and cat on the result.
. "$(dirname "$0")/lib.bash"
need_data

sl pack idx "$DATA/t10k-images-idx3-ubyte.gz" "$DATA/t10k-labels-idx1-ubyte.gz" \
  -o t10k.slr
expect_rc 0 "pack idx"
[ -z "$ERR" ] || fail "pack wrote to stderr when it is not a terminal"
contains "$OUT" "10000 records" "pack summary"
[ -f t10k.slr ] || fail "no t10k.slr"
[ "$(ls -A | grep -c tmp)" -eq 0 ] || fail "a temporary file was left: $(ls -A)"

sl inspect --json t10k.slr
expect_rc 0 "inspect --json"
[ "$(printf '%s\n' "$OUT" | wc -l)" -eq 1 ] || fail "inspect --json is not one line"
contains "$OUT" '"records":10000'
contains "$OUT" '"chunks":'
contains "$OUT" '"fields":[{"name":"image","dtype":"u8","shape":[28,28]},{"name":"label","dtype":"i64","shape":[]}]'
contains "$OUT" '"source":"idx"'
contains "$OUT" '"images":"t10k-images-idx3-ubyte.gz"'
contains "$OUT" '"labels":"t10k-labels-idx1-ubyte.gz"'
contains "$OUT" "\"file_bytes\":$(stat -c %s t10k.slr),"
contains "$OUT" '"raw_bytes":'
contains "$OUT" '"stored_bytes":'

sl inspect t10k.slr
expect_rc 0 "inspect"
contains "$OUT" "records:   10000"
contains "$OUT" "image  u8[28,28]"
contains "$OUT" "label  i64[]"
contains "$OUT" "ratio:"

sl verify t10k.slr
expect_rc 0 "verify"
contains "$OUT" "t10k.slr: ok (10000 records, "

# The last record's label is the last byte of the labels file.
want=$(zcat "$DATA/t10k-labels-idx1-ubyte.gz" | tail -c 1 | od -An -tu1 | tr -d ' ')
sl cat --json --from 9999 --count 1 t10k.slr
expect_rc 0 "cat --json --from 9999"
[ "$(printf '%s\n' "$OUT" | wc -l)" -eq 1 ] || fail "expected one JSON line"
contains "$OUT" "\"label\":$want}"
contains "$OUT" '{"image":[[0,'
# 28 rows of 28 numbers.
rows=$(printf '%s' "$OUT" | grep -o '\[[0-9,]*\]' | wc -l)
[ "$rows" -eq 28 ] || fail "expected 28 image rows, got $rows"
row1=$(printf '%s' "$OUT" | grep -o '\[[0-9,]*\]' | head -1 | tr -cd ',' | wc -c)
[ "$row1" -eq 27 ] || fail "expected 28 numbers in a row"

# Every label, in order.
slr_labels t10k.slr > got.txt
t10k_labels > want.txt
cmp -s got.txt want.txt || fail "labels read back differ from the idx file"

# Text output: '#K field=value', tensors elided.
sl cat --from 3 --count 2 t10k.slr
expect_rc 0 "cat"
[ "$(printf '%s\n' "$OUT" | wc -l)" -eq 2 ] || fail "expected two lines"
contains "$OUT" "#3 image=u8[28,28] ["
contains "$OUT" " ... "
contains "$OUT" "#4 image="
contains "$OUT" " label=$(sed -n 5p want.txt)"

# Options change the chunking.
sl pack idx "$DATA/t10k-images-idx3-ubyte.gz" "$DATA/t10k-labels-idx1-ubyte.gz" \
  -o rpc.slr --records-per-chunk 1000 --level 1
expect_rc 0 "pack --records-per-chunk"
sl inspect --json rpc.slr
contains "$OUT" '"chunks":10,'
sl pack idx "$DATA/t10k-images-idx3-ubyte.gz" "$DATA/t10k-labels-idx1-ubyte.gz" \
  -o small.slr --chunk-bytes=64K -q
expect_rc 0 "pack --chunk-bytes"
[ -z "$OUT" ] || fail "-q printed a summary"
sl inspect --json --chunks small.slr
contains "$OUT" '"chunk_list":[{"offset":32,"first_record":0,'
chunks=$(printf '%s' "$OUT" | sed 's/.*"chunks":\([0-9]*\),.*/\1/')
[ "$chunks" -ge 100 ] || fail "64K chunks of 8 MB should be >= 100, got $chunks"
sl verify small.slr rpc.slr t10k.slr
expect_rc 0 "verify of three files"
[ "$(printf '%s\n' "$OUT" | grep -c ': ok (10000 records')" -eq 3 ] || fail "three ok lines"
echo "pack_idx: ok"
