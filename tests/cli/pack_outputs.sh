# pack_outputs.sh - every packer writes through one output path (issue 24,
# item 1; src/transport/output.c): `pack tokens` and `pack images --format wds`
# as `pack text` does.  A symbolic link planted at the old temporary name
# (OUT.tmp-PID) is never followed; an output that is an input is refused
# (the corpus, an image of the folder); a token re-pack killed while it
# writes its 3rd shard leaves the old set whole and readable; SIGUSR1 and
# SIGALRM while the outputs are complete under their temporary names
# leave no temporary file; missing output folders are created; `tokens:`
# refuses a set that mixes two pack runs, naming the odd file.
. "$(dirname "$0")/lib.bash"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "$(dirname "$SLUICE")/.." && pwd)
IMAGES=${SLUICE_WITH_IMAGES:-1}
LUA=${SLUICE_WITH_LUA:-1}

no_temps() {
  local left
  left=$(find . -name '*.tmp-*' ! -name 'planted*' ! -type l)
  [ -z "$left" ] || fail "$1: temporary files left: $left"
}

# A folder of two classes of "images" (the packers check the PNG magic).
mkdir -p imgs/cat imgs/dog
for c in cat dog; do
  for i in 1 2 3; do
    printf '\211PNG\r\n\032\n%s %s' "$c" "$i" > "imgs/$c/$i.png"
  done
done
cp -r imgs imgs.orig

# --- a symbolic link planted at the old temporary name ------------------------
printf 'precious\n' > victim
printf 'hello tokens\n' > corpus.txt
cp corpus.txt corpus.orig
# planted OUT CMD...: links OUT.tmp-PID (the old packers' temporary name)
# to victim, then runs CMD as that PID (exec keeps the shell's).
planted() {
  local out=$1
  shift
  bash -c 'ln -s victim "$0.tmp-$$" && exec "$@"' "$out" "$@" 2> err.txt
  RC=$?
  ERR=$(cat err.txt)
  expect_rc 0 "$* beside a planted link"
  [ "$(cat victim)" = precious ] || fail "$* wrote through a planted link"
  rm -f "$out".tmp-*
}
planted out.bin "$SLUICE" pack tokens corpus.txt -o out.bin -q
[ "$(od -An -tu4 -j 8 -N4 out.bin | tr -d ' ')" = 13 ] || fail "out.bin has not 13 tokens"
if [ "$IMAGES" != 0 ]; then
  planted w.tar "$SLUICE" pack images imgs --format wds -o w.tar -q
  [ "$(tar -tf w.tar | grep -vc '^__sluice_set__$')" -eq 12 ] ||
    fail "w.tar does not hold 6 samples"
fi

# --- an output that is an input ------------------------------------------------
sl pack tokens corpus.txt -o corpus.txt
expect_rc 1 "pack tokens corpus.txt -o corpus.txt"
contains "$ERR" "corpus.txt is the input corpus.txt"
cmp -s corpus.txt corpus.orig || fail "pack tokens -o corpus.txt changed the corpus"
ln -s corpus.txt c_000001.bin
sl pack tokens corpus.txt --shards 2 -o c.bin
expect_rc 1 "a token shard name that is the input"
contains "$ERR" "c_000001.bin is the input corpus.txt"
[ ! -e c_000000.bin ] || fail "shard 0 written beside a refused shard 1"
sl pack tokens corpus.txt --val-tokens 3 -o corpus_val.bin
expect_rc 0 "a val shard beside its corpus"
ln -s corpus.txt v_val.bin
sl pack tokens corpus.txt --val-tokens 3 -o v.bin
expect_rc 1 "a val shard name that is the input"
contains "$ERR" "v_val.bin is the input corpus.txt"
cmp -s corpus.txt corpus.orig || fail "a refused shard changed the corpus"
if [ "$IMAGES" != 0 ]; then
  sl pack images imgs --format wds -o imgs/cat/1.png
  expect_rc 1 "pack images --format wds -o imgs/cat/1.png"
  contains "$ERR" "imgs/cat/1.png is the input imgs/cat/1.png"
  ln -s imgs/dog/2.png s-000001.tar
  sl pack images imgs --format wds --shards 2 -o s.tar
  expect_rc 1 "a wds shard name that is an input image"
  contains "$ERR" "s-000001.tar is the input imgs/dog/2.png"
  [ ! -e s-000000.tar ] || fail "wds shard 0 written beside a refused shard 1"
  diff -r imgs imgs.orig > /dev/null || fail "a refused wds pack changed an image"
fi
no_temps "refused outputs"

# --- missing output folders ----------------------------------------------------
sl pack tokens corpus.txt -o new/a/one.bin -q
expect_rc 0 "pack tokens into a missing folder"
[ -f new/a/one.bin ] || fail "new/a/one.bin not written"
sl pack tokens corpus.txt --shards 2 --val-tokens 2 -o new/b/set.bin -q
expect_rc 0 "pack tokens --shards into a missing folder"
for f in set_val set_000000 set_000001; do
  [ -f "new/b/$f.bin" ] || fail "new/b/$f.bin not written"
done
printf x > afile
sl pack tokens corpus.txt -o afile/x.bin
expect_rc 1 "pack tokens below a file"
contains "$ERR" "afile is not a folder"
if [ "$IMAGES" != 0 ]; then
  sl pack images imgs --format wds --shards 2 -o new/c/w.tar -q
  expect_rc 0 "pack images --format wds into a missing folder"
  [ -f new/c/w-000001.tar ] || fail "new/c/w-000001.tar not written"
fi
no_temps "missing folders"
# Token shards are written one at a time: 300 of them under 64 descriptors.
(ulimit -n 64 && exec "$SLUICE" pack tokens corpus.txt --shards 300 -o many/m.bin -q) ||
  fail "pack tokens --shards 300 under ulimit -n 64"
[ "$(ls many | wc -l)" -eq 300 ] || fail "many/ does not hold 300 shards"

# --- a token re-pack that fails on its 3rd shard -------------------------------
# 1537 byte tokens in 3 shards: 512, 512, 513 tokens, files of 2048, 2048 and
# 2050 bytes; under `ulimit -f 2` (2 KiB a file) the 3rd one is too large.
printf 'old corpus\n' > old.txt
mkdir -p tok other sig
sl pack tokens old.txt --shards 3 -o tok/set.bin -q
expect_rc 0 "the old token set"
mkdir keep && cp tok/set_00000?.bin keep/
head -c 1537 /dev/zero | tr '\0' n > new.txt
(
  ulimit -f 2
  exec "$SLUICE" pack tokens new.txt --shards 3 -o tok/set.bin -q
) 2> err.txt
RC=$?
[ "$RC" -ne 0 ] || fail "the re-pack over the size limit succeeded"
for s in 0 1 2; do
  cmp -s "tok/set_00000$s.bin" "keep/set_00000$s.bin" ||
    fail "after a failed re-pack (status $RC), set_00000$s.bin is not the old shard"
done
no_temps "a token re-pack killed by SIGXFSZ"

# Reading token shards: `sluice run` of a script that counts windows.
cat > count.lua << 'EOF'
local sluice = require "sluice"
return sluice.open("tokens:" .. arg[1], {seq_len = 2})
EOF
export LUA_PATH="$SRC/lua/?.lua;$SRC/lua/?/init.lua;;"
export LUA_CPATH="$BUILD/lua/?.so;;"
if [ "$LUA" = 1 ]; then
  sl run count.lua 'tok/set_*.bin'
  expect_rc 0 "read the old set after the failed re-pack"
  contains "$OUT" "3 samples"
fi

# --- tokens: refuses a mixed set -----------------------------------------------
sl pack tokens new.txt --shards 3 -o other/set.bin -q
expect_rc 0 "a second token set"
cp other/set_000001.bin tok/set_000001.bin
if [ "$LUA" = 1 ]; then
  sl run count.lua 'tok/set_*.bin'
  expect_rc 1 "read a mixed token set"
  contains "$ERR" "tok/set_000001.bin is from another pack run"
  contains "$ERR" "a mixed shard set"
  sl run count.lua 'other/set_*.bin'
  expect_rc 0 "read the second set"
fi

# --- signals while the outputs are complete under their temporary names --------
rm -rf imgs && cp -r imgs.orig imgs && rm -f tok/*.tmp-*
# The summary is printed before the renames; a stdout pipe that is full
# (64 KiB written, never read) holds the pack there.
hold_then() { # SIG CMD...: starts CMD with a full stdout, sends SIG
  local sig=$1 pid i
  shift
  rm -f fifo
  mkfifo fifo
  sleep 30 < fifo &
  local reader=$!
  exec 3> fifo
  head -c 65536 /dev/zero >&3
  "$@" >&3 2> sig.err &
  pid=$!
  for i in $(seq 200); do
    [ -n "$(find . -name '*.tmp-*' ! -name 'planted*' ! -type l)" ] && break
    sleep 0.05
  done
  sleep 0.3
  kill -"$sig" $pid
  for i in $(seq 200); do kill -0 $pid 2> /dev/null || break; sleep 0.05; done
  if kill -0 $pid 2> /dev/null; then
    kill -KILL $pid
    wait $pid
    fail "pack still running 10 s after SIG$sig"
  fi
  wait $pid
  RC=$?
  exec 3>&-
  kill $reader 2> /dev/null
  wait $reader 2> /dev/null
}
for s in USR1:138 ALRM:142; do
  if [ "$IMAGES" != 0 ]; then
    hold_then "${s%%:*}" "$SLUICE" pack images imgs --format wds --shards 2 -o sig/w.tar
    [ "$RC" -eq "${s##*:}" ] || fail "wds SIG${s%%:*}: exit status $RC, not ${s##*:}: $(cat sig.err)"
    [ ! -e sig/w-000000.tar ] || fail "wds SIG${s%%:*} left a shard"
    no_temps "pack images --format wds, SIG${s%%:*}"
  fi
  hold_then "${s%%:*}" "$SLUICE" pack tokens new.txt --shards 2 -o sig/t.bin
  [ "$RC" -eq "${s##*:}" ] || fail "tokens SIG${s%%:*}: exit status $RC, not ${s##*:}: $(cat sig.err)"
  [ ! -e sig/t_000000.bin ] || fail "tokens SIG${s%%:*} left a shard"
  no_temps "pack tokens, SIG${s%%:*}"
done
# The folders a pack made go with its temporary files.
hold_then USR1 "$SLUICE" pack tokens new.txt --shards 2 -o made/deep/t.bin
[ "$RC" -eq 138 ] || fail "SIGUSR1 into a new folder: exit status $RC: $(cat sig.err)"
[ ! -e made ] || fail "the folders made by a pack killed by SIGUSR1 were left"
echo "pack_outputs: ok"
