# pack_text.sh - `sluice pack text`: one record per line across files in
# order, with an empty line, a \r\n line, a last line without a newline,
# escapes and invalid UTF-8 in `cat --json`, and text sharding.
. "$(dirname "$0")/lib.bash"

printf 'alpha\n\ncrlf\r\ntab\there "q" \\ \xc3\xa9\nbad\xffbyte\nctl\x01 nul\x00x\nlast' > a.txt
printf 'second\n' > b.txt
: > c.txt
printf 'only-cr\r' > d.txt

sl pack text a.txt b.txt c.txt d.txt -o text.slr --records-per-chunk 3
expect_rc 0 "pack text"
sl inspect --json text.slr
expect_rc 0 "inspect --json"
contains "$OUT" '"records":9,'
contains "$OUT" '"chunks":3,'
contains "$OUT" '"fields":[{"name":"text","dtype":"bytes","shape":[-1]}]'
contains "$OUT" '"source":"text"'
contains "$OUT" '"files":"a.txt,b.txt,c.txt,d.txt"'

sl cat --json text.slr
expect_rc 0 "cat --json"
cat > want.json <<'W'
{"text":"alpha"}
{"text":""}
{"text":"crlf"}
{"text":"tab\there \"q\" \\ é"}
{"text":"bad\u00ffbyte"}
{"text":"ctl\u0001 nul\u0000x"}
{"text":"last"}
{"text":"second"}
{"text":"only-cr"}
W
printf '%s\n' "$OUT" > got.json
cmp -s got.json want.json || fail "cat --json: $(diff got.json want.json)"

sl cat --from 2 --count 3 text.slr
expect_rc 0 "cat"
cat > want.txt <<'W'
#2 text="crlf"
#3 text="tab\there \"q\" \\ é"
#4 text="bad\xffbyte"
W
printf '%s\n' "$OUT" > got.txt
cmp -s got.txt want.txt || fail "cat (text): $(diff got.txt want.txt)"

# --from at the end prints nothing; past it is an error.
sl cat --from 9 text.slr
expect_rc 0 "cat --from 9"
[ -z "$OUT" ] || fail "cat --from <records> printed something"
sl cat --from 10 text.slr
expect_rc 1 "cat --from past the end"
contains "$ERR" "sluice: cat: text.slr: --from 10 is past the end (9 records)"

# A long line: JSON whole, text elided.
head -c 100000 /dev/zero | tr '\0' x > long.txt
sl pack text long.txt -o long.slr
expect_rc 0 "pack a long line"
sl cat --json long.slr
[ "$OUT" = "{\"text\":\"$(cat long.txt)\"}" ] || fail "long line not whole in JSON"
sl cat long.slr
[ "${#OUT}" -lt 200 ] || fail "long line not elided in text (${#OUT} chars)"
contains "$OUT" 'xxx"...'

# Shards of text: contiguous needs the count first (5 + 4 of 9).
sl pack text a.txt b.txt c.txt d.txt -o ts.slr --shards 2 --shard-mode contiguous
expect_rc 0 "pack text --shards 2 contiguous"
sl cat --json ts-00000-of-00002.slr
printf '%s\n' "$OUT" > got.json
sl cat --json ts-00001-of-00002.slr
printf '%s\n' "$OUT" >> got.json
cmp -s got.json want.json || fail "contiguous text shards: $(diff got.json want.json)"
sl inspect --json ts-00000-of-00002.slr
contains "$OUT" '"records":5,'
sl pack text a.txt b.txt c.txt d.txt -o tr.slr --shards 2
expect_rc 0 "pack text --shards 2"
sl cat --json tr-00001-of-00002.slr
printf '%s\n' "$OUT" > got.json
sed -n '2p;4p;6p;8p' want.json > want2.json
cmp -s got.json want2.json || fail "round-robin text shard 1: $(diff got.json want2.json)"

# A missing input fails and leaves nothing behind.
sl pack text a.txt missing.txt -o bad.slr
expect_rc 1 "pack text with a missing file"
contains "$ERR" "sluice: pack: "
contains "$ERR" "missing.txt: cannot open"
[ ! -e bad.slr ] || fail "bad.slr left behind"
[ "$(ls -A | grep -c tmp)" -eq 0 ] || fail "a temporary file was left: $(ls -A)"
echo "pack_text: ok"
