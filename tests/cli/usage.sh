# usage.sh - the command line contract: --help and --version succeed, bad
# usage exits 2 with a message and the usage on stderr, failures exit 1
# with "sluice: <command>: <message>", and a failed pack leaves nothing.
. "$(dirname "$0")/lib.bash"

printf 'one\ntwo\n' > in.txt
"$SLUICE" pack text in.txt -o ok.slr -q || fail "pack text in.txt"

# --help everywhere: exit 0, usage on stdout.
for args in "--help" "-h" "help" "help pack" "pack --help" "pack idx --help" \
  "inspect --help" "verify -h" "cat --help" "help cat"; do
  sl $args
  expect_rc 0 "sluice $args"
  contains "$OUT" "Usage:" "stdout of 'sluice $args'"
  [ -z "$ERR" ] || fail "sluice $args wrote to stderr"
done
sl pack --help
contains "$OUT" "--shard-mode MODE"
contains "$OUT" "round-robin"
contains "$OUT" "contiguous"
contains "$OUT" "data-00000-of-00004.slr"

sl --version
expect_rc 0 "--version"
contains "$OUT" "sluice 0."

# Bad usage: exit 2, a message and the usage on stderr, nothing on stdout.
usage() {
  sl "$@"
  expect_rc 2 "sluice $*"
  contains "$ERR" "sluice: " "stderr of 'sluice $*'"
  contains "$ERR" "Usage:" "stderr of 'sluice $*'"
  [ -z "$OUT" ] || fail "sluice $* wrote to stdout"
}
usage
usage frobnicate
usage --frobnicate
usage help frobnicate
usage pack
usage pack tar x -o y.slr
usage pack idx a.gz -o y.slr
usage pack idx a.gz b.gz c.gz -o y.slr
usage pack idx a.gz b.gz
usage pack text -o y.slr
usage pack text in.txt -o y.slr --level abc
usage pack text in.txt -o y.slr --level 0
usage pack text in.txt -o y.slr --level 23
usage pack text in.txt -o y.slr --chunk-bytes 12X
usage pack text in.txt -o y.slr --chunk-bytes 2G
usage pack text in.txt -o y.slr --records-per-chunk 0
usage pack text in.txt -o y.slr --shards 0
usage pack text in.txt -o y.slr --shards -3
usage pack text in.txt -o y.slr --shard-mode sideways
usage pack text in.txt -o y.slr --bogus
usage pack text in.txt -o
usage pack text in.txt -o y.slr --quiet=yes
usage inspect
usage inspect ok.slr ok.slr
usage inspect --xml ok.slr
usage verify
usage verify --fast ok.slr
usage cat
usage cat ok.slr --from -1
usage cat ok.slr --count x
usage cat ok.slr --from
usage cat -z ok.slr
[ ! -e y.slr ] || fail "a usage error created y.slr"
contains "$("$SLUICE" pack text in.txt -o y.slr --bogus 2>&1)" \
  "unknown option '--bogus'"

# Options and operands in any order, -o glued, "--" ends options.
sl pack text -oz.slr -q in.txt
expect_rc 0 "pack text -oz.slr"
sl cat --count=1 z.slr --json
expect_rc 0 "cat with options after the file"
[ "$OUT" = '{"text":"one"}' ] || fail "cat --count=1 gave '$OUT'"
cp ok.slr ./-dash.slr
sl cat -- -dash.slr
expect_rc 0 "cat -- -dash.slr"
contains "$OUT" '#1 text="two"'

# Failures: exit 1, "sluice: <command>: <message>" on stderr.
sl inspect nothere.slr
expect_rc 1 "inspect of a missing file"
contains "$ERR" "sluice: inspect: nothere.slr: cannot open"
sl cat nothere.slr
expect_rc 1 "cat of a missing file"
contains "$ERR" "sluice: cat: nothere.slr: cannot open"
sl inspect in.txt
expect_rc 1 "inspect of a text file"
contains "$ERR" "sluice: inspect: in.txt:"

# A failed pack leaves no output and no temporary file.
printf '\0\0\x08\x03\0\0\0\x02\0\0\0\x02\0\0\0\x02abcdefgh' > img
printf '\0\0\x08\x01\0\0\0\x03\x01\x02\x03' > lab
sl pack idx img lab -o fail.slr
expect_rc 1 "pack idx with 2 images and 3 labels"
contains "$ERR" "sluice: pack: img holds 2 images but lab holds 3 labels"
sl pack idx img lab -o fail.slr --shards 3
expect_rc 1 "sharded pack idx with 2 images and 3 labels"
sl pack idx img img -o fail.slr
expect_rc 1 "pack idx with images as labels"
contains "$ERR" "img: expected labels"
[ -z "$(ls -A | grep -e fail -e tmp)" ] || fail "a failed pack left files: $(ls -A)"
# Below a file: no folder can be made there (a missing folder is created).
printf x > nodir
sl pack text in.txt -o nodir/out.slr
expect_rc 1 "pack below a file"
contains "$ERR" "sluice: pack: "
contains "$ERR" "nodir/out.slr"
echo "usage: ok"
