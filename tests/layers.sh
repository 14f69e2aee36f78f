#!/usr/bin/env bash
# tests/layers.sh - the folders of src/ form a DAG of layers (CTest: layers).
#
#   usage: layers.sh SRC_DIR [OBJECT...]
#          layers.sh --self-test
#
# The order, lowest first (docs/ARCHITECTURE.md, "Layers"); folders of one
# level do not use each other:
#
#   0 core       allocation, errors, samples, tensors, schemas, buffer pools,
#                threads, options structs, paths, CRC32C, the stats switch
#   1 sync       channel, the parallel-stage engine
#   1 transport  bytes in and out: the byte-source interface, files, HTTP,
#                S3, whole-file maps, the output path, the I/O fault hooks
#   2 stages     the reader base, the sources and the format-independent
#                stages
#   3 lm         the language-model stages (padded_batch, bucket_batch,
#                pack, window, mix)
#   3 formats    the format readers (SLR, idx, text, npy, csv, tar, wds,
#                tfrecord, token shards)
#   3 image      image decoding, the image reader and augmentation
#   4 open       opening data: the format registry (sl_open), open_files, the
#                epoch plan, shard sets, wds and token shard sets
#   5 pack       every writer: the SLR writer and its sink, the packers
#                (idx, text, tokens, images, wds), the tar writer
#   6 script     the embedded Lua
#   6 device     the double buffer and its copy engines
#
# A file may use its own folder and any folder of a lower level, nothing
# else.  Three checks:
#   - includes: every `#include "FOLDER/..."` of every .c/.h under SRC_DIR;
#   - calls: with the library's object files given (CMake passes
#     $<TARGET_OBJECTS:sluice_objects>), every symbol an object of FOLDER
#     leaves undefined and another object of the library defines (nm) must be
#     defined in FOLDER or below: this catches a call through a declaration
#     that lives in a lower header (core/internal.h) but is defined higher;
#   - pairs: no two objects call each other (A leaves undefined a symbol B
#     defines, and B one A defines), in one folder or not: one of them is
#     the lower piece, or the shared part belongs in a third file.  The
#     pairs in MUTUAL_KNOWN are tolerated until their fix lands.
# Exit 0 when all hold; 1 with one line per violation.
set -euo pipefail

# Pairs of objects known to call each other, "folder/x.c.o:folder/y.c.o",
# tolerated (an environment setting adds to them; none today).
MUTUAL_KNOWN="${MUTUAL_KNOWN:-}"

level_of() {
  case "$1" in
    core) echo 0 ;;
    sync | transport) echo 1 ;;
    stages) echo 2 ;;
    lm | formats | image) echo 3 ;;
    open) echo 4 ;;
    pack) echo 5 ;;
    script | device) echo 6 ;;
    *) echo -1 ;;
  esac
}

# allowed FROM TO: a file of FROM may use TO.
allowed() {
  [ "$1" = "$2" ] && return 0
  local a b
  a=$(level_of "$1")
  b=$(level_of "$2")
  [ "$a" -ge 0 ] && [ "$b" -ge 0 ] && [ "$b" -lt "$a" ]
}

check() {
  local src=$1
  shift
  local bad=0 f folder inc to

  # Every folder of src/ has a level (a new folder must be placed).
  for f in "$src"/*/; do
    folder=$(basename "$f")
    if [ "$(level_of "$folder")" -lt 0 ]; then
      echo "layers: src/$folder/ has no layer: add it to tests/layers.sh and docs/ARCHITECTURE.md"
      bad=1
    fi
  done

  # Includes.
  while IFS= read -r f; do
    folder=${f#"$src"/}
    folder=${folder%%/*}
    while IFS= read -r inc; do
      to=${inc%%/*}
      [ -d "$src/$to" ] || continue # "sluice.h", "internal.h", system paths
      if ! allowed "$folder" "$to"; then
        echo "layers: ${f#"$src"/} ($folder, level $(level_of "$folder")) includes \"$inc\" ($to, level $(level_of "$to"))"
        bad=1
      fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
  done < <(find "$src" -name '*.[ch]' | sort)

  # Calls: symbols defined in one folder and used in another.
  if [ $# -gt 0 ]; then
    local defs uses
    defs=$(mktemp)
    uses=$(mktemp)
    for f in "$@"; do
      folder=${f##*/src/}
      folder=${folder%%/*}
      nm "$f" | awk -v d="$folder" -v o="$(basename "$f")" '
        NF == 3 && $2 ~ /^[TDBRVW]$/ { print $3, d, o >> "'"$defs"'" }
        NF == 2 && $1 == "U"         { print $2, d, o >> "'"$uses"'" }'
    done
    while read -r sym from obj to dobj; do
      if ! allowed "$from" "$to"; then
        echo "layers: $from/${obj%.o} ($from, level $(level_of "$from")) calls $sym, defined in $to/${dobj%.o} ($to, level $(level_of "$to"))"
        bad=1
      fi
    done < <(sort -k1,1 "$uses" | join -j1 - <(sort -u -k1,1 "$defs") |
             awk '$2 != $4')
    # Pairs: FOLDER/OBJECT calls FOLDER/OBJECT, both ways.
    while read -r a b sa sb; do
      case " $MUTUAL_KNOWN " in *" $a:$b "* | *" $b:$a "*) continue ;; esac
      echo "layers: ${a%.o} and ${b%.o} call each other (${a%.o} calls $sa, ${b%.o} calls $sb)"
      bad=1
    done < <(sort -k1,1 "$uses" | join -j1 - <(sort -u -k1,1 "$defs") |
             awk '$2 "/" $3 != $4 "/" $5 {
                    k = $2 "/" $3 " " $4 "/" $5
                    if (!(k in e)) e[k] = $1
                  }
                  END {
                    for (k in e) {
                      split(k, p, " ")
                      r = p[2] " " p[1]
                      if ((r in e) && p[1] < p[2]) print p[1], p[2], e[k], e[r]
                    }
                  }' | sort)
    rm -f "$defs" "$uses"
  fi
  return $bad
}

self_test() {
  local t o
  t=$(mktemp -d)
  o=$(mktemp -d) # the objects, outside the source tree checked
  trap 'rm -rf "$t" "$o"' RETURN
  mkdir -p "$t/core" "$t/sync" "$t/open" "$t/image"
  printf '#include "core/internal.h"\n' >"$t/sync/ok.c"
  printf '#include "image/image.h"\n#include "sluice.h"\n' >"$t/open/ok.c"
  check "$t" >/dev/null || { echo "self-test: a clean tree was refused"; return 1; }
  printf '#include "sync/engine.h"\n' >"$t/core/bad.c"
  check "$t" >/dev/null && { echo "self-test: core including sync/ passed"; return 1; }
  rm "$t/core/bad.c"
  printf '#  include "open/registry.h"\n' >"$t/image/bad.h"
  check "$t" >/dev/null && { echo "self-test: image including open/ passed"; return 1; }
  rm "$t/image/bad.h"
  mkdir "$t/misc"
  check "$t" >/dev/null && { echo "self-test: a folder without a layer passed"; return 1; }
  rmdir "$t/misc"
  # Calls, on real objects: sync calls a function defined in stages.
  command -v "${CC:-cc}" >/dev/null || { echo "self-test: no C compiler"; return 1; }
  mkdir -p "$o/src/sync" "$o/src/stages"
  printf 'int up(void);\nint down(void) { return up(); }\n' >"$t/d.c"
  printf 'int up(void) { return 1; }\n' >"$t/u.c"
  "${CC:-cc}" -c "$t/d.c" -o "$o/src/sync/d.c.o"
  "${CC:-cc}" -c "$t/u.c" -o "$o/src/stages/u.c.o"
  check "$t" "$o/src/sync/d.c.o" "$o/src/stages/u.c.o" >/dev/null &&
    { echo "self-test: sync calling stages passed"; return 1; }
  # Two objects of one folder calling each other; one way is fine.
  mkdir -p "$o/src/core"
  printf 'int pong(void);\nint ping(void) { return pong(); }\n' >"$t/a.c"
  printf 'int pong(void) { return 1; }\n' >"$t/b.c"
  "${CC:-cc}" -c "$t/a.c" -o "$o/src/core/a.c.o"
  "${CC:-cc}" -c "$t/b.c" -o "$o/src/core/b.c.o"
  check "$t" "$o/src/core/a.c.o" "$o/src/core/b.c.o" >/dev/null ||
    { echo "self-test: a one-way call was refused"; return 1; }
  printf 'int ping(void);\nint pong(void) { return ping(); }\n' >"$t/b.c"
  "${CC:-cc}" -c "$t/b.c" -o "$o/src/core/b.c.o"
  check "$t" "$o/src/core/a.c.o" "$o/src/core/b.c.o" >/dev/null &&
    { echo "self-test: two objects calling each other passed"; return 1; }
  MUTUAL_KNOWN="core/b.c.o:core/a.c.o" check "$t" "$o/src/core/a.c.o" \
    "$o/src/core/b.c.o" >/dev/null ||
    { echo "self-test: a known pair was refused"; return 1; }
  echo "self-test: ok"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
  exit
fi
[ $# -ge 1 ] || { echo "usage: $0 SRC_DIR [OBJECT...] | --self-test" >&2; exit 2; }
src=$1
shift
self_test >/dev/null || { self_test; exit 1; }
if check "$src" "$@"; then
  echo "layers: core < {sync, transport} < stages < {lm, formats, image} < open < pack < {script, device}: $(find "$src" -name '*.[ch]' | wc -l) files, $# objects, no upward include or call, no two objects calling each other${MUTUAL_KNOWN:+ (known: $MUTUAL_KNOWN)}"
else
  exit 1
fi
