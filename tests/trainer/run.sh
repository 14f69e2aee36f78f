#!/usr/bin/env bash
# run.sh TRAINER CLI - CTest test demo.short: the main job, short.
#
# Packs Fashion-MNIST (train and t10k) with the built CLI into the build
# tree's data/ (kept: `make demo` uses the same files) unless there, then
# trains 2 epochs through examples/fashion_mnist.lua and checks each line
# (epoch=N loss=L test_acc=A wait=W step_us=S cached_step_us=C
# interference=R) and test_acc >= 0.80 at the end.
# LUA_PATH / LUA_CPATH come from CTest.  A missing data set fails.
set -u
trainer=$1 cli=$2
data=${SLUICE_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
out="$(cd "$(dirname "$cli")/.." && pwd)/data"

fail() { echo "FAIL: $*" >&2; exit 1; }

for s in train t10k; do
  for k in images-idx3 labels-idx1; do
    [ -f "$data/$s-$k-ubyte.gz" ] ||
      fail "$data/$s-$k-ubyte.gz is missing: install the dataset-fashion-mnist package"
  done
done
[ -x "$cli" ] || fail "no sluice CLI at $cli"
[ -x "$trainer" ] || fail "no trainer at $trainer"
mkdir -p "$out" || fail "cannot make $out"
for s in train t10k; do
  [ -s "$out/$s.slr" ] && continue
  # Packed under a private name, then renamed: parallel runs never see half
  # a file.
  tmp="$out/.$s.$$.slr"
  "$cli" pack idx -q "$data/$s-images-idx3-ubyte.gz" \
    "$data/$s-labels-idx1-ubyte.gz" -o "$tmp" || fail "sluice pack idx $s failed"
  mv -f "$tmp" "$out/$s.slr" || fail "cannot rename $tmp"
done

log=$("$trainer" --data "$out" --epochs 2 2>&1)
rc=$?
printf '%s\n' "$log"
[ $rc -eq 0 ] || fail "trainer exited with status $rc"
lines=$(printf '%s\n' "$log" | grep '^epoch=')
[ "$(printf '%s\n' "$lines" | wc -l)" -eq 2 ] || fail "expected 2 epoch lines"
re='^epoch=[12] loss=[0-9]+\.[0-9]+ test_acc=[01]\.[0-9]+ wait=[01]\.[0-9]+ step_us=[0-9]+\.[0-9] cached_step_us=[0-9]+\.[0-9] interference=[0-9]+\.[0-9]{2}$'
while IFS= read -r l; do
  [[ $l =~ $re ]] || fail "bad epoch line: '$l'"
done <<<"$lines"
acc=$(printf '%s\n' "$lines" | tail -1 | sed 's/.*test_acc=\([0-9.]*\).*/\1/')
awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }' ||
  fail "test_acc $acc after 2 epochs is below the floor 0.80"
echo "demo.short: ok (test_acc $acc)"
