# pack_images.sh - `sluice pack images` on Fashion-MNIST images written here
# as PNG and JPEG class folders (by sluice_test_mkimages, built beside the
# sluice binary): records, schema, classes metadata, labels in a seeded
# random order by default (the same for the same seed, mixed classes in
# every chunk) and in folder order with --order sorted, verify; then the
# failures (a file that is not an image, a missing folder, usage errors),
# which leave no output behind.
. "$(dirname "$0")/lib.bash"
need_data
# `sluice run` scripts require "sluice" (as tests/cli/run.sh does).
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "$(dirname "$SLUICE")/.." && pwd)
export LUA_PATH="$SRC/lua/?.lua;$SRC/lua/?/init.lua;;"
export LUA_CPATH="$BUILD/lua/?.so;;"
MKIMAGES="$(dirname "$SLUICE")/sluice_test_mkimages"
[ -x "$MKIMAGES" ] || fail "helper $MKIMAGES is not built"

sl pack images --help
expect_rc 0 "pack images --help"
contains "$OUT" "sluice pack images FOLDER -o OUT.slr"
contains "$OUT" 'the schema metadata "classes"'

CLASSES='Ankle_boot,Bag,Coat,Dress,Pullover,Sandal,Shirt,Sneaker,T-shirt_top,Trouser'
for kind in png jpeg; do
  "$MKIMAGES" "$kind" 200 "$kind" "$DATA" > "want-$kind.txt" ||
    fail "mkimages $kind failed"
  [ "$(wc -l < "want-$kind.txt")" -eq 200 ] || fail "mkimages wrote no labels"

  sl pack images "$kind" -o "$kind.slr" --records-per-chunk 50 --order sorted
  expect_rc 0 "pack images $kind"
  [ -z "$ERR" ] || fail "pack wrote to stderr when it is not a terminal"
  contains "$OUT" "packed 200 records into $kind.slr"
  [ "$(ls -A | grep -c tmp)" -eq 0 ] || fail "a temporary file was left"

  sl inspect --json "$kind.slr"
  expect_rc 0 "inspect --json"
  contains "$OUT" '"records":200'
  contains "$OUT" '"chunks":4'
  contains "$OUT" '"fields":[{"name":"image","dtype":"bytes","shape":[-1]},{"name":"label","dtype":"i64","shape":[]}]'
  contains "$OUT" '"source":"image"'
  contains "$OUT" "\"root\":\"$kind\""
  contains "$OUT" "\"classes\":\"$CLASSES\""

  sl verify "$kind.slr"
  expect_rc 0 "verify"
  contains "$OUT" "$kind.slr: ok (200 records, "

  slr_labels "$kind.slr" > "got-$kind.txt"
  cmp -s "got-$kind.txt" "want-$kind.txt" ||
    fail "labels of $kind.slr differ from the class folders"

  # The bytes are stored as they are (checked byte for byte by
  # tests/test_image.c): the record starts with the format's magic.
  sl cat --from 0 --count 1 "$kind.slr"
  expect_rc 0 "cat"
  if [ "$kind" = png ]; then magic='#0 image="\x89PNG'; else magic='#0 image="\xff\xd8\xff'; fi
  contains "$OUT" "$magic"

  # The default order: a permutation of the folder's, drawn from --seed
  # (default 0), so every chunk of 50 holds most of the 10 classes (sorted:
  # 2 to 4); the same seed gives the same order, another seed another.
  sl pack images "$kind" -o "r0-$kind.slr" --records-per-chunk 50
  expect_rc 0 "pack images $kind in random order"
  contains "$OUT" "packed 200 records into r0-$kind.slr"
  slr_labels "r0-$kind.slr" > "r0-$kind.txt"
  cmp -s "r0-$kind.txt" "want-$kind.txt" &&
    fail "the default order is the folder's order"
  [ "$(sort "r0-$kind.txt")" = "$(sort "want-$kind.txt")" ] ||
    fail "the random order is not a permutation of the folder's records"
  for c in 0 1 2 3; do
    k=$(sed -n "$((c * 50 + 1)),$((c * 50 + 50))p" "r0-$kind.txt" | sort -u | wc -l)
    [ "$k" -ge 7 ] || fail "chunk $c of r0-$kind.slr holds $k classes (want >= 7)"
    k=$(sed -n "$((c * 50 + 1)),$((c * 50 + 50))p" "want-$kind.txt" | sort -u | wc -l)
    [ "$k" -le 4 ] || fail "chunk $c of the sorted order holds $k classes"
  done
  sl pack images "$kind" -o "r0b-$kind.slr" --records-per-chunk 50 --seed 0 --order random
  expect_rc 0 "pack images $kind --seed 0"
  slr_labels "r0b-$kind.slr" | cmp -s - "r0-$kind.txt" ||
    fail "--seed 0 --order random is not the default order"
  sl cat --json "r0-$kind.slr" > a.json && sl cat --json "r0b-$kind.slr" > b.json
  cmp -s a.json b.json || fail "the same seed gave other records"
  sl pack images "$kind" -o "r7-$kind.slr" --records-per-chunk 50 --seed 7
  expect_rc 0 "pack images $kind --seed 7"
  slr_labels "r7-$kind.slr" | cmp -s - "r0-$kind.txt" &&
    fail "--seed 7 gave the order of seed 0"
done

# Records decode on read, in a pipeline run by the CLI (a build with Lua).
if [ "${SLUICE_WITH_LUA:-1}" = 1 ]; then
  cat > decode.lua <<'LUA'
local sluice = require "sluice"
return sluice.open(arg[1])
  :decode_image{threads = 2, channels = 1, shape = {28, 28}}:batch(50)
LUA
  sl run decode.lua png.slr
  expect_rc 0 "run decode.lua"
  contains "$OUT$ERR" "4 batches"
fi

# A file named .jpg that is not an image: the pack fails naming it.
mkdir -p bad/a && cp "$(find png -name '*.png' | head -1)" bad/a/ &&
  echo "not an image" > bad/a/zz.jpg
sl pack images bad -o bad.slr
expect_rc 1 "pack images with a text file"
contains "$ERR" "sluice: pack: pack images: bad/a/zz.jpg: not a JPEG or PNG image (13 bytes)"
[ ! -e bad.slr ] || fail "a failed pack left bad.slr"
[ "$(ls -A | grep -c tmp)" -eq 0 ] || fail "a failed pack left a temporary file"

sl pack images missing -o m.slr
expect_rc 1 "pack images of a missing folder"
contains "$ERR" "missing: No such file or directory"

mkdir empty
sl pack images empty -o e.slr
expect_rc 1 "pack images of an empty folder"
contains "$ERR" "empty: no images"

sl pack images png jpeg -o two.slr
expect_rc 2 "pack images with two folders"
contains "$ERR" "pack images wants one FOLDER (got 2)"
sl pack images -o none.slr
expect_rc 2 "pack images without a folder"
sl pack images png -o o.slr --order shuffled
expect_rc 2 "pack images --order shuffled"
contains "$ERR" "--order is random or sorted, not 'shuffled'"
sl pack images png -o o.slr --seed -1
expect_rc 2 "pack images --seed -1"
contains "$ERR" "--seed wants an integer 0..2^64-1, not '-1'"
sl pack text want-png.txt -o o.slr --seed 3
expect_rc 2 "pack text --seed"
contains "$ERR" "--seed is for pack images (idx and text keep their input's order)"
[ ! -e o.slr ] || fail "a refused pack wrote o.slr"
exit 0
