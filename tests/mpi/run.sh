#!/usr/bin/env bash
# tests/mpi/run.sh BUILD_DIR - 4 ranks started by Open MPI's mpirun read the
# same SLR files through sl_open_files, rank and world taken from the
# variables mpirun sets; checks that every epoch's shares are disjoint and
# cover every record once, and that each rank's share changes between
# epochs.  Then elastic restarts (tests/mpi/elastic.c): the states of a job
# of 4 ranks resumed by 2, and of 2 resumed by 3, deliver the rest of the
# epoch exactly once, and the next epoch whole.  Then 5 ranks read the
# WebDataset fixture shards (3 of 4 samples) through sl_open with no
# options: 3 samples each, together every one.  Builds tests/mpi/*.c
# against BUILD_DIR/libsluice.so (CC and SLUICE_SAN_CFLAGS from the
# environment, as CTest passes them).
#
# A missing mpirun is a failure, not a skip: `make deps` installs
# openmpi-bin.
set -euo pipefail

if ! command -v mpirun >/dev/null 2>&1; then
  echo "FAIL: mpirun not found: install openmpi-bin (make deps installs it)"
  exit 1
fi

build=${1:?usage: run.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
ranks=4
epochs=3
total=319 # the records shard_ids writes

work=$(mktemp -d /tmp/sluice-test-mpi-XXXXXX)
trap 'rm -rf "$work"' EXIT

# shellcheck disable=SC2086 # SLUICE_SAN_CFLAGS is a list of flags
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror ${SLUICE_SAN_CFLAGS:-} \
  -I"$src/include" "$src/tests/mpi/shard_ids.c" \
  -L"$build" -lsluice -Wl,-rpath,"$build" -o "$work/shard_ids"
# shellcheck disable=SC2086
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror ${SLUICE_SAN_CFLAGS:-} \
  -I"$src/include" "$src/tests/mpi/elastic.c" \
  -L"$build" -lsluice -Wl,-rpath,"$build" -o "$work/elastic"

"$work/shard_ids" write "$work/data"

# Only mpirun's variables may decide the ranks.
unset RANK WORLD_SIZE PMI_RANK PMI_SIZE PADDLE_TRAINER_ID PADDLE_TRAINERS_NUM \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE
mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
  "$work/shard_ids" read "$work/data" "$epochs"

fail() {
  echo "FAIL: $*"
  exit 1
}

for r in $(seq 0 $((ranks - 1))); do
  [ -f "$work/data/rank$r.info" ] || fail "rank $r wrote no info"
  grep -qx "rank $r world $ranks" "$work/data/rank$r.info" ||
    fail "rank $r: $(cat "$work/data/rank$r.info")"
done

seq 0 $((total - 1)) >"$work/want"
for e in $(seq 0 $((epochs - 1))); do
  min=$total max=0
  for r in $(seq 0 $((ranks - 1))); do
    n=$(wc -l <"$work/data/rank$r.epoch$e.txt")
    [ "$n" -lt "$min" ] && min=$n
    [ "$n" -gt "$max" ] && max=$n
  done
  [ $((max - min)) -le 1 ] || fail "epoch $e: share sizes $min..$max"
  cat "$work/data"/rank*.epoch"$e".txt | sort -n >"$work/got"
  dups=$(uniq -d "$work/got" | wc -l)
  [ "$dups" -eq 0 ] || fail "epoch $e: $dups records read by two ranks"
  cmp -s "$work/want" "$work/got" ||
    fail "epoch $e: the shares do not cover the $total records once"
done

for r in $(seq 0 $((ranks - 1))); do
  for e in $(seq 1 $((epochs - 1))); do
    if cmp -s <(sort -n "$work/data/rank$r.epoch$((e - 1)).txt") \
      <(sort -n "$work/data/rank$r.epoch$e.txt"); then
      fail "rank $r read the same share in epochs $((e - 1)) and $e"
    fi
  done
done

echo "mpi: $ranks ranks x $epochs epochs: disjoint, covering, changing"

# Elastic restarts: W ranks save mid-epoch, W2 ranks resume from all W
# states.
elastic() {
  local w=$1 w2=$2 tag=e$1to$2
  mpirun --allow-run-as-root --oversubscribe -np "$w" \
    "$work/elastic" save "$work/data" "$tag"
  mpirun --allow-run-as-root --oversubscribe -np "$w2" \
    "$work/elastic" resume "$work/data" "$tag" "$w"
  cat "$work/data/$tag".old*.txt "$work/data/$tag".new*.txt | sort -n \
    >"$work/got"
  dups=$(uniq -d "$work/got" | wc -l)
  [ "$dups" -eq 0 ] || fail "elastic $w -> $w2: $dups records twice"
  cmp -s "$work/want" "$work/got" ||
    fail "elastic $w -> $w2: the epoch's records are not all there once"
  cat "$work/data/$tag".next*.txt | sort -n >"$work/got"
  cmp -s "$work/want" "$work/got" ||
    fail "elastic $w -> $w2: the next epoch is not every record once"
  echo "mpi: elastic $w -> $w2 ranks: the rest of the epoch exactly once"
}
elastic 4 2
elastic 2 3

# WebDataset shards through sl_open with no options (issue 24 item 10):
# 5 ranks over 3 shards of 4 samples each read 3 (pad: ceil(12/5)), and
# together every sample.
mpirun --allow-run-as-root --oversubscribe -np 5 \
  "$work/shard_ids" wds "wds:$src/tests/data/formats/wds-{000000..000002}.tar" \
  "$work/data"
for r in 0 1 2 3 4; do
  n=$(wc -l <"$work/data/wds$r.txt")
  [ "$n" -eq 3 ] || fail "wds: rank $r read $n samples, not 3"
done
[ "$(sort -u "$work/data"/wds*.txt | wc -l)" -eq 12 ] ||
  fail "wds: the 5 ranks do not cover the 12 samples"
echo "mpi: wds 5 ranks over 3 shards: 3 samples each, covering"
