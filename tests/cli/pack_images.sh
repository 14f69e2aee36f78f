# pack_images.sh - `sluice pack images` on Fashion-MNIST images written here
# as PNG and JPEG class folders (by sluice_test_mkimages, built beside the
# sluice binary): records, schema, classes metadata, labels in order,
# verify; then the failures (a file that is not an image, a missing folder,
# usage errors), which leave no output behind.
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

  sl pack images "$kind" -o "$kind.slr" --records-per-chunk 50
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
done

# Records decode on read, in a pipeline run by the CLI.
cat > decode.lua <<'LUA'
local sluice = require "sluice"
return sluice.open(arg[1])
  :decode_image{threads = 2, channels = 1, shape = {28, 28}}:batch(50)
LUA
sl run decode.lua png.slr
expect_rc 0 "run decode.lua"
contains "$OUT$ERR" "4 batches"

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
exit 0
