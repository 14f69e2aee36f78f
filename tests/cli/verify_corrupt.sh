# verify_corrupt.sh - `sluice verify` on damaged files: one flipped byte in
# a chunk payload, in the footer, a truncated file, a file that is not SLR.
# Each exits 1 with a message naming the file (and, for a chunk, the chunk
# and its offset); sound files beside them still report ok.
. "$(dirname "$0")/lib.bash"
need_data

sl pack idx "$DATA/t10k-images-idx3-ubyte.gz" "$DATA/t10k-labels-idx1-ubyte.gz" \
  -o good.slr --chunk-bytes 256K -q
expect_rc 0 "pack"
size=$(stat -c %s good.slr)

# flip FILE POS: xor the byte at POS with 0x5a, in place.
flip() {
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "\\$(printf '%03o' $(( b ^ 0x5a )))" |
    dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# The chunk holding byte POS, from inspect --json --chunks: "C OFFSET".
chunk_at() {
  "$SLUICE" inspect --json --chunks good.slr | grep -o '"offset":[0-9]*' |
    cut -d: -f2 | awk -v p="$1" '$1 <= p { c = NR - 1; off = $1 } END { print c, off }'
}

pos=$(( size / 2 ))
read -r c off < <(chunk_at "$pos")
cp good.slr mid.slr
flip mid.slr "$pos"
cmp -s good.slr mid.slr && fail "the flip changed nothing"
sl verify mid.slr
expect_rc 1 "verify of a file with a flipped byte at $pos"
contains "$ERR" "sluice: verify: mid.slr: chunk $c at offset $off:"
[ -z "$OUT" ] || fail "verify printed ok for a bad file"

# Reading stops at the bad chunk with the same kind of message.
sl cat --json mid.slr
expect_rc 1 "cat of a damaged file"
contains "$ERR" "sluice: cat: mid.slr: chunk $c at offset $off:"

# One bad file among good ones: every file reported, exit 1.
sl verify good.slr mid.slr good.slr
expect_rc 1 "verify good bad good"
[ "$(printf '%s\n' "$OUT" | grep -c '^good.slr: ok (10000 records, ')" -eq 2 ] ||
  fail "the good files were not both reported ok"

# A byte of the footer.
cp good.slr foot.slr
flip foot.slr $(( size - 20 ))
sl verify foot.slr
expect_rc 1 "verify with a damaged footer"
contains "$ERR" "foot.slr: footer at offset $(( size - 64 ))"

# Truncated.
head -c $(( size - 100 )) good.slr > cut.slr
sl verify cut.slr
expect_rc 1 "verify of a truncated file"
contains "$ERR" "cut.slr: no SLR footer"
contains "$ERR" "truncated"

# Not SLR at all, and missing.
sl verify "$DATA/t10k-labels-idx1-ubyte.gz" nothere.slr
expect_rc 1 "verify of a non-SLR and a missing file"
contains "$ERR" "not an SLR file"
contains "$ERR" "nothere.slr: cannot open"

sl verify good.slr
expect_rc 0 "verify of the intact file"
echo "verify_corrupt: ok"
