# pack_tokens.sh - `sluice pack tokens`: llm.c shards from bytes and from
# token ids (header magic, version and count, the tokens little-endian),
# --eos, --shards, --val-tokens, and usage errors.
. "$(dirname "$0")/lib.bash"

# u32 FILE OFFSET: the little-endian uint32 at OFFSET.
u32() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' '; }
# u16s FILE: the tokens of a shard, one per line.
u16s() { tail -c +1025 "$1" | od -An -v -tu2 -w2 | tr -d ' '; }

printf 'ab\n' > a.txt
printf 'xyz' > b.txt
sl pack tokens a.txt b.txt -o all.bin
expect_rc 0 "pack tokens bytes"
contains "$OUT" "packed 6 tokens from 2 files into 1 shard"
[ "$(u32 all.bin 0)" = 20240520 ] || fail "magic: $(u32 all.bin 0)"
[ "$(u32 all.bin 4)" = 1 ] || fail "version"
[ "$(u32 all.bin 8)" = 6 ] || fail "count: $(u32 all.bin 8)"
[ "$(stat -c %s all.bin)" = $((1024 + 12)) ] || fail "size"
[ "$(u16s all.bin | tr '\n' ' ')" = "97 98 10 120 121 122 " ] ||
  fail "tokens: $(u16s all.bin | tr '\n' ' ')"

sl pack tokens a.txt b.txt --eos 256 -o eos.bin -q
expect_rc 0 "pack tokens --eos"
[ -z "$OUT" ] || fail "-q printed: $OUT"
[ "$(u16s eos.bin | tr '\n' ' ')" = "97 98 10 256 120 121 122 256 " ] ||
  fail "eos tokens: $(u16s eos.bin | tr '\n' ' ')"

printf '1 2 3\n4\n\n65535 7\n' > ids.txt
sl pack tokens --ids --eos 9 ids.txt -o ids.bin
expect_rc 0 "pack tokens --ids"
[ "$(u16s ids.bin | tr '\n' ' ')" = "1 2 3 4 9 65535 7 9 " ] ||
  fail "id tokens: $(u16s ids.bin | tr '\n' ' ')"

seq 0 99 | tr '\n' ' ' > hundred.txt
sl pack tokens --ids hundred.txt --shards 3 --val-tokens 10 -o data.bin
expect_rc 0 "pack tokens --shards 3 --val-tokens 10"
[ "$(u32 data_val.bin 8)" = 10 ] || fail "val count"
[ "$(u32 data_000000.bin 8)" = 30 ] || fail "shard 0 count"
[ "$(u32 data_000001.bin 8)" = 30 ] || fail "shard 1 count"
[ "$(u32 data_000002.bin 8)" = 30 ] || fail "shard 2 count"
[ "$(u16s data_000000.bin | head -1)" = 10 ] || fail "shard 0 starts at 10"
[ "$(u16s data_000002.bin | tail -1)" = 99 ] || fail "shard 2 ends at 99"
[ ! -e data.bin ] || fail "data.bin written with --shards"
ls *.tmp-* 2>/dev/null && fail "temporaries left"

printf '1 70000\n' > big.txt
sl pack tokens --ids big.txt -o big.bin
expect_rc 1 "an id above 65535"
contains "$ERR" "big.txt:1: token id 70000 is above 65535"
[ ! -e big.bin ] || fail "big.bin written"

sl pack tokens a.txt
expect_rc 2 "no -o"
contains "$ERR" "missing -o OUT.bin"
sl pack tokens missing.txt -o m.bin
expect_rc 1 "a missing input"
contains "$ERR" "missing.txt"
exit 0
