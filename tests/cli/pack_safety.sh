# pack_safety.sh - what `sluice pack` does to the files around it (issue 13):
# an output that is an input is refused (also through links), a missing
# output folder is created, a stdout that cannot take the summary fails the
# pack before any output is renamed, a re-pack killed by SIGXFSZ while
# writing shard 2 leaves the old set whole, signals stop a level-19 pack
# within a second and leave no temporary file, and the reading commands take
# --max-chunk-bytes.
. "$(dirname "$0")/lib.bash"
need_data
IMG="$DATA/t10k-images-idx3-ubyte.gz"
LAB="$DATA/t10k-labels-idx1-ubyte.gz"

no_temps() {
  local left
  left=$(find . -name '*.tmp-*')
  [ -z "$left" ] || fail "$1: temporary files left: $left"
}

# --- an output that is an input ------------------------------------------------
printf 'one\ntwo\n' > in.txt
cp in.txt in.orig
ln in.txt hard.txt
ln -s in.txt soft.txt
for o in in.txt hard.txt soft.txt; do
  sl pack text in.txt -o "$o"
  expect_rc 1 "pack text in.txt -o $o"
  contains "$ERR" "is the input" "stderr of -o $o"
  cmp -s in.txt in.orig || fail "-o $o changed the input"
done
cp "$IMG" img.gz
cp "$LAB" lab.gz
cp img.gz img.orig
sl pack idx img.gz lab.gz -o img.gz
expect_rc 1 "pack idx img.gz lab.gz -o img.gz"
contains "$ERR" "img.gz is the input img.gz"
cmp -s img.gz img.orig || fail "pack idx -o img.gz changed the input"
# A shard name that is an input (through a symlink to the input).
ln -s in.txt s-00001-of-00002.slr
sl pack text in.txt -o s.slr --shards 2
expect_rc 1 "a shard name that is the input"
contains "$ERR" "s-00001-of-00002.slr is the input in.txt"
[ ! -e s-00000-of-00002.slr ] || fail "shard 0 written beside a refused shard 1"
cmp -s in.txt in.orig || fail "the shard changed the input"
no_temps "refused outputs"

# --- a missing output folder ---------------------------------------------------
sl pack text in.txt -o new/folder/out.slr -q
expect_rc 0 "pack into a missing folder"
sl verify new/folder/out.slr
expect_rc 0 "verify the pack in the new folder"
printf x > afile
sl pack text in.txt -o afile/out.slr
expect_rc 1 "pack below a file"
contains "$ERR" "afile is not a folder"

# --- a stdout that cannot take the summary -------------------------------------
sl pack text in.txt -o keep.slr -q
cp keep.slr keep.orig
printf 'three\n' >> in.txt
"$SLUICE" pack text in.txt -o keep.slr > /dev/full 2> err.txt
RC=$?
ERR=$(cat err.txt)
expect_rc 1 "pack > /dev/full"
contains "$ERR" "cannot write the summary to stdout"
[ "$(grep -c . err.txt)" -eq 1 ] || fail "one message for a full stdout"
cmp -s keep.slr keep.orig || fail "pack > /dev/full replaced keep.slr"
"$SLUICE" pack text in.txt -o fresh.slr > /dev/full 2> /dev/null
[ ! -e fresh.slr ] || fail "pack > /dev/full left fresh.slr"
no_temps "pack > /dev/full"

# --- a re-pack killed by SIGXFSZ while it writes shard 2 -----------------------
# Contiguous shards of one chunk each (64M): every shard is written when the
# pack closes.  Shards 0-1 hold short lines, 2-3 long ones over the limit.
for i in $(seq 1000); do echo "old $i"; done > old.txt
{
  for i in $(seq 1000); do echo "short $i"; done
  head -c 1500000 /dev/urandom | base64 -w 1500
} > new.txt
sl pack text old.txt -o set.slr --shards 4 --shard-mode contiguous -q
expect_rc 0 "the old set"
mkdir keep && cp set-0000?-of-00004.slr keep/
(
  ulimit -f 200 # 200 KiB per file
  exec "$SLUICE" pack text new.txt -o set.slr --shards 4 \
    --shard-mode contiguous --chunk-bytes 64M -q
) 2> err.txt
RC=$?
[ "$RC" -ne 0 ] || fail "the re-pack over the size limit succeeded"
for s in 0 1 2 3; do
  f=set-0000$s-of-00004.slr
  cmp -s "$f" "keep/$f" || fail "after a failed re-pack (status $RC), $f is not the old shard"
done
no_temps "a re-pack killed by SIGXFSZ"

# --- signals -------------------------------------------------------------------
# 24 MB of random letters: one 256M chunk at level 19 takes minutes.
head -c 18000000 /dev/urandom | base64 -w 1000 > big.txt
set -m # background jobs get SIGINT (they would ignore it without job control)

# pack_then SIG...: starts a level-19 pack of big.txt, sends the signals 0.7 s
# later, and sets RC and TOOK (milliseconds from the first signal to the
# exit).  The pack alone would run for minutes; the bound on TOOK (2.5 s) is
# wide enough for a loaded 2-vCPU machine (1 s failed once there while a
# build ran beside the suite) and still proves the signal stops it.
pack_then() {
  "$SLUICE" pack text big.txt -o big.slr --level 19 --chunk-bytes 256M -q \
    2> sig.err &
  local pid=$! t0 t1 i
  sleep 0.7
  t0=$(date +%s%N)
  for sig in "$@"; do kill -"$sig" $pid; done
  for i in $(seq 600); do kill -0 $pid 2> /dev/null || break; sleep 0.01; done
  if kill -0 $pid 2> /dev/null; then
    kill -KILL $pid
    wait $pid
    rm -f big.slr.tmp-*
    fail "pack still running 6 s after SIG$1"
  fi
  t1=$(date +%s%N)
  wait $pid
  RC=$?
  TOOK=$(((t1 - t0) / 1000000))
}

for s in INT:130 TERM:143 HUP:129 PIPE:141 ALRM:142 XFSZ:153; do
  pack_then "${s%%:*}"
  [ "$RC" -eq "${s##*:}" ] || fail "SIG${s%%:*}: exit status $RC, not ${s##*:}: $(cat sig.err)"
  [ "$TOOK" -lt 2500 ] || fail "SIG${s%%:*}: took $TOOK ms to stop"
  [ ! -e big.slr ] || fail "SIG${s%%:*} left big.slr"
  no_temps "SIG${s%%:*}"
done
# A second Ctrl-C ends the pack at once.
pack_then INT INT
[ "$RC" -eq 130 ] || fail "two SIGINTs: exit status $RC"
no_temps "two SIGINTs"
set +m

# --- --max-chunk-bytes on the reading commands ---------------------------------
sl pack idx "$IMG" "$LAB" -o t.slr --chunk-bytes 64K -q
for cmd in verify inspect cat; do
  sl $cmd --max-chunk-bytes 1K t.slr
  expect_rc 1 "$cmd --max-chunk-bytes 1K"
  contains "$ERR" "exceeds the limit of 1024 bytes, the max_chunk_bytes option"
done
sl verify --max-chunk-bytes 64K t.slr
expect_rc 0 "verify --max-chunk-bytes 64K of a --chunk-bytes 64K pack"
sl cat --max-chunk-bytes=2M --count 1 t.slr
expect_rc 0 "cat --max-chunk-bytes=2M"
sl inspect --max-chunk-bytes 0 t.slr
expect_rc 2 "--max-chunk-bytes 0"
echo "pack_safety: ok"
