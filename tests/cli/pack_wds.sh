# pack_wds.sh - `sluice pack wds` (WebDataset tar shards written by Python's
# tarfile, tests/data/formats/) into SLR: brace patterns, every sample,
# the fields and their dtypes; `sluice pack images --format wds` (when the
# image layer is built): an image folder as tar shards that tar(1) lists
# and `pack wds` reads back; usage errors.
. "$(dirname "$0")/lib.bash"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FIX="$SRC/tests/data/formats"

sl pack --help
expect_rc 0 "pack --help"
contains "$OUT" "sluice pack wds SHARD... -o OUT.slr"
contains "$OUT" "--format FMT"

sl pack wds "$FIX/wds-{000000..000002}.tar" -o all.slr --records-per-chunk 5
expect_rc 0 "pack wds"
contains "$OUT" "packed 12 records into all.slr"
sl inspect --json all.slr
expect_rc 0 "inspect --json"
contains "$OUT" '"records":12'
contains "$OUT" '{"name":"__key__","dtype":"bytes","shape":[-1]}'
contains "$OUT" '{"name":"cls","dtype":"i64","shape":[]}'
contains "$OUT" '{"name":"x.npy","dtype":"f32","shape":[-1,-1]}'
contains "$OUT" '"source":"wds"'

sl pack wds "$FIX/wds-missing.tar" -o bad.slr
expect_rc 1 "pack wds of a shard missing a field"
contains "$ERR" "sample 'b' has no 'txt' member"
[ ! -e bad.slr ] || fail "a failed pack left its output"

sl pack wds -o x.slr
expect_rc 2 "pack wds without shards"
sl pack text "$FIX/table.csv" --format wds -o x.slr
expect_rc 2 "--format for text"
contains "$ERR" "--format is for pack images"

if [ "${SLUICE_WITH_IMAGES:-1}" != 0 ]; then
  need_data
  MKIMAGES="$(dirname "$SLUICE")/sluice_test_mkimages"
  [ -x "$MKIMAGES" ] || fail "helper $MKIMAGES is not built"
  "$MKIMAGES" png 30 png "$DATA" > want.txt || fail "mkimages failed"
  sl pack images png --format wds --shards 3 -o shards.tar --order sorted
  expect_rc 0 "pack images --format wds"
  contains "$OUT" "packed 30 records into 3 shards (shards-000000.tar"
  [ "$(tar -tf shards-000001.tar | wc -l)" -eq 21 ] ||
    fail "shard 1 should hold its set identity and 10 samples of 2 members"
  tar -tf shards-000000.tar | head -3 | tr '\n' ' ' |
    grep -q "__sluice_set__ 00000000.png 00000000.cls" ||
    fail "members are not __sluice_set__, then KEY.png, KEY.cls"
  # The set identity (issue 24 item 1): the run's id, the count, the index.
  ID1=$(tar -xOf shards-000001.tar __sluice_set__)
  contains "$ID1" "shards 3"
  contains "$ID1" "index 1"
  contains "$(tar -xOf shards-000002.tar __sluice_set__)" \
    "$(echo "$ID1" | head -1)"
  sl pack wds "shards-{000000..000002}.tar" -o back.slr
  expect_rc 0 "pack wds of written shards"
  contains "$OUT" "packed 30 records"
  # A shard of an earlier run beside a later run's: refused, named.
  cp shards-000001.tar old-000001.tar
  sl pack images png --format wds --shards 3 -o shards.tar --order sorted
  expect_rc 0 "pack images --format wds again"
  sl pack wds "shards-{000000..000002}.tar" -o again.slr
  expect_rc 0 "pack wds of the second run's shards"
  mv old-000001.tar shards-000001.tar
  sl pack wds "shards-{000000..000002}.tar" -o two-runs.slr
  expect_rc 1 "pack wds of shards of two runs"
  contains "$ERR" "shards-000001.tar is shard 1 of 3 of set"
  contains "$ERR" "shards-000000.tar is shard 0 of 3 of set"
  [ ! -e two-runs.slr ] || fail "a refused pack left its output"
  # The class names beside the shards, and back in the SLR's metadata.
  [ "$(wc -l < shards-classes.txt)" -eq 10 ] || fail "shards-classes.txt: 10 lines"
  sl inspect --json back.slr
  contains "$OUT" '"classes":"'
  # A folder mixing JPEG and PNG (issue 24 item 11): the shards read back.
  "$MKIMAGES" mixed 12 png "$DATA" > /dev/null || fail "mkimages png failed"
  "$MKIMAGES" mixed 24 jpeg "$DATA" > /dev/null || fail "mkimages jpeg failed"
  sl pack images mixed --format wds -o mixed.tar --order sorted
  expect_rc 0 "pack images --format wds of a mixed folder"
  contains "$OUT" "packed 36 records into mixed.tar"
  tar -tf mixed.tar | grep -q '\.png$' || fail "no png member"
  tar -tf mixed.tar | grep -q '\.jpg$' || fail "no jpg member"
  sl pack wds mixed.tar -o mixed.slr
  expect_rc 0 "pack wds of a mixed folder's shard"
  contains "$OUT" "packed 36 records"
  sl inspect --json mixed.slr
  contains "$OUT" '"records":36'
  contains "$OUT" '"classes":"Ankle_boot,Bag,'
fi
echo "ok"
