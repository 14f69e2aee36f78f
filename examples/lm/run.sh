#!/usr/bin/env bash
# run.sh BIGRAM CLI [mpi] - CTest tests example.lm and mpi.lm.
#
# Packs the licence texts Debian ships (/usr/share/common-licenses) into
# llm.c token shards with `sluice pack tokens` (bytes as tokens: 4 training
# shards and a validation shard), then trains the bigram model 3 epochs and
# checks that the training and validation losses fall below ln(256), epoch
# after epoch.  With "mpi": the same shards read by 2 ranks under mpirun
# (block = B): each rank reads as many batches, half a single process's
# (within one batch per shard), and its loss falls too.  A missing mpirun
# fails (make deps installs openmpi-bin).
set -u
bigram=$1 cli=$2 mode=${3:-}
texts=${SLUICE_LM_TEXTS:-/usr/share/common-licenses}
fail() { echo "FAIL: $*" >&2; exit 1; }

[ -d "$texts" ] || fail "no texts at $texts (Debian's base-files ships them)"
work=$(mktemp -d /tmp/sluice-example-lm-XXXXXX)
trap 'rm -rf "$work"' EXIT
files=$(find "$texts" -type f | LC_ALL=C sort)
# shellcheck disable=SC2086 # one argument per file
"$cli" pack tokens $files --shards 4 --val-tokens 16384 -o "$work/lm.bin" ||
  fail "sluice pack tokens failed"

check_falling() { # LOG: each epoch's loss below the last, the first < 5.5
  awk '/^rank=/ {
         for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
         if (v["loss"] >= 5.5 || (n && v["loss"] >= last)) bad = 1
         if (v["val_loss"] != "" && (v["val_loss"] >= 5.5 ||
             (n && v["val_loss"] >= lastv))) bad = 1
         last = v["loss"]; lastv = v["val_loss"]; n++ }
       END { exit (n < 3 || bad) }' <<<"$1"
}

if [ "$mode" != mpi ]; then
  unset RANK WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK \
    PMI_SIZE PADDLE_TRAINER_ID PADDLE_TRAINERS_NUM
  log=$("$bigram" --epochs 3 "$work/lm_0*.bin" "$work/lm_val.bin" 2>&1) ||
    fail "bigram exited with an error: $log"
  printf '%s\n' "$log"
  check_falling "$log" || fail "the losses do not fall below ln(256)"
  exit 0
fi

command -v mpirun >/dev/null 2>&1 ||
  fail "mpirun not found: install openmpi-bin (make deps installs it)"
single=$(env -u RANK -u WORLD_SIZE "$bigram" --epochs 1 "$work/lm_0*.bin" 2>&1) ||
  fail "bigram (1 process): $single"
n1=$(sed -n 's/.* batches=\([0-9]*\) .*/\1/p' <<<"$single")
log=$(mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$bigram" --epochs 3 "$work/lm_0*.bin" 2>&1) || fail "mpirun: $log"
printf '%s\n' "$log"
for r in 0 1; do
  mine=$(grep "^rank=$r world=2 " <<<"$log")
  [ "$(wc -l <<<"$mine")" -eq 3 ] || fail "rank $r printed no 3 epochs"
  check_falling "$mine" || fail "rank $r: the loss does not fall"
done
b0=$(grep '^rank=0 .* epoch=1 ' <<<"$log" | sed 's/.* batches=\([0-9]*\) .*/\1/')
b1=$(grep '^rank=1 .* epoch=1 ' <<<"$log" | sed 's/.* batches=\([0-9]*\) .*/\1/')
[ "$b0" = "$b1" ] || fail "ranks read $b0 and $b1 batches"
# 4 shards: at most one batch per shard is lost to the ranks' equal shares.
[ $((2 * b0)) -le "$n1" ] && [ $((2 * b0 + 8)) -ge "$n1" ] ||
  fail "2 ranks x $b0 batches vs $n1 for one process"
exit 0
