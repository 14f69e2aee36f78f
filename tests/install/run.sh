#!/usr/bin/env bash
# run.sh - CTest test install.consumer: does an installed sluice work for a
# user who never saw the source tree?
#
#   run.sh BUILD_DIR LIBDIR LUA_CDIR LUA_DIR
#
# Installs BUILD_DIR into a scratch prefix with `cmake --install --prefix`
# (a prefix other than the configured one, so relocatability is tested too),
# then:
#   1. builds tests/install/consumer.c with `pkg-config --cflags --libs
#      sluice` and runs it;
#   2. builds the same program from a separate CMake project with
#      find_package(sluice) and sluice::sluice, and runs it;
#   3. loads the installed facade under luajit with LUA_PATH pointing only
#      into the prefix, and checks that the FFI loaded the installed
#      libsluice (found through the installed sluice.library, relative to
#      its own location), not the build tree's, and that no C module was
#      installed (Lua's one bridge to C is the FFI);
#   4. checks the example plugins are installed and load into the installed
#      `sluice`;
#   5. installs a second copy (a decoy) and, with LD_LIBRARY_PATH at the
#      decoy's lib, checks that the facade, the command and the plugins
#      still bind to the libsluice of their own prefix; then moves the
#      prefix and checks the facade follows it.
# LIBDIR, LUA_CDIR, LUA_DIR are the install dirs relative to the prefix.
# Environment (set by CTest): CC, LUAJIT, and for sanitizer builds
# SLUICE_SAN_CFLAGS (the consumers must be instrumented like libsluice) and
# SLUICE_SAN_PRELOAD (the runtime luajit needs preloaded).
set -euo pipefail

build=$(cd "$1" && pwd)
libdir=$2
lua_cdir=$3
lua_dir=$4
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
luajit=${LUAJIT:-luajit}
san_cflags=${SLUICE_SAN_CFLAGS:-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

step() { printf '\n--- %s\n' "$*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; exit 1; }
for f in "$libdir/libsluice.so" "$libdir/libsluice.a" include/sluice.h \
         include/sluice/reader.h include/sluice/pipeline.h \
         bin/sluice "$libdir/pkgconfig/sluice.pc" \
         "$libdir/cmake/sluice/sluiceConfig.cmake" \
         "$libdir/cmake/sluice/sluiceConfigVersion.cmake" \
         "$lua_dir/sluice/library.lua" "$lua_dir/sluice/ship.lua"; do
  [ -e "$prefix/$f" ] || { echo "missing from the install: $f"; exit 1; }
  echo "installed: $f"
done
# The sl__ functions of sluice's own tools are not an API.
[ ! -e "$prefix/include/sluice/unstable.h" ] ||
  { echo "installed, but internal: include/sluice/unstable.h"; exit 1; }

step "pkg-config consumer"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
pc_libdir=$(pkg-config --variable=libdir sluice)
# The .pc must point into the scratch prefix, wherever it was configured.
[ "$(cd "$pc_libdir" && pwd -P)" = "$(cd "$prefix/$libdir" && pwd -P)" ] ||
  { echo "sluice.pc libdir $pc_libdir is not $prefix/$libdir"; exit 1; }
# shellcheck disable=SC2046,SC2086 # pkg-config output is meant to split
"$cc" -std=c11 -Wall -Wextra -Werror $san_cflags "$here/consumer.c" \
  $(pkg-config --cflags --libs sluice) -Wl,--disable-new-dtags,-rpath,"$pc_libdir" \
  -o "$tmp/consumer_pc"
"$tmp/consumer_pc"

step "find_package consumer"
cmake -S "$here/cmake" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san_cflags" \
  -DCMAKE_EXE_LINKER_FLAGS="$san_cflags -Wl,--disable-new-dtags" \
  >"$tmp/cmake.log" ||
  { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cmake-build" >"$tmp/build.log" ||
  { cat "$tmp/build.log"; exit 1; }
"$tmp/cmake-build/consumer"

step "the facade's FFI loads the prefix's libsluice"
[ ! -e "$prefix/$lua_cdir/sluice/core.so" ] ||
  { echo "a C module was installed: $lua_cdir/sluice/core.so"; exit 1; }
lua_env=(LUA_PATH="$prefix/$lua_dir/?.lua;$prefix/$lua_dir/?/init.lua"
         LUA_CPATH="$prefix/$lua_cdir/?.so")
if [ -n "${SLUICE_SAN_PRELOAD:-}" ]; then
  lua_env+=(LD_PRELOAD="$SLUICE_SAN_PRELOAD" ASAN_OPTIONS=detect_leaks=0)
fi
# loaded_from.lua PREFIX: requires sluice.cdef and checks, in
# /proc/self/maps, that every libsluice mapped into the process lies under
# PREFIX (one copy, the prefix's own).
cat >"$tmp/loaded_from.lua" <<'LUA'
local prefix = assert(arg[1])
local ffi = require "ffi"
local C = require "sluice.cdef"
assert(ffi.string(C.sl_version()) == "0.1.0", "version")
local libs = {}
for line in io.lines("/proc/self/maps") do
  local path = line:match("%s(/%S*libsluice%.so[%.%d]*)$")
  if path then libs[path] = true end
end
local n = 0
for path in pairs(libs) do
  n = n + 1
  assert(path:sub(1, #prefix + 1) == prefix .. "/",
         "the facade loaded " .. path .. ", not the libsluice under " .. prefix)
  print("libsluice " .. ffi.string(C.sl_version()) .. " from " .. path)
end
assert(n == 1, n .. " libsluice files mapped")
LUA
env "${lua_env[@]}" "$luajit" "$tmp/loaded_from.lua" "$(cd "$prefix" && pwd -P)"
# SLUICE_LIBRARY overrides the search (docs/LUA.md): a file that is not
# there is an error, not a fallback.
if env "${lua_env[@]}" SLUICE_LIBRARY="$tmp/nowhere/libsluice.so" \
     "$luajit" -e 'require "sluice.cdef"' 2>"$tmp/override.err"; then
  echo "SLUICE_LIBRARY at a missing file did not fail"; exit 1
fi
grep -q "cannot load SLUICE_LIBRARY=$tmp/nowhere/libsluice.so" \
  "$tmp/override.err" || { cat "$tmp/override.err"; exit 1; }

step "require \"sluice\" (the facade) from the prefix"
if [ -e "$prefix/$lua_dir/sluice/init.lua" ]; then
  # The worker states of `map` capture this state's package.path, so this
  # also checks that they find the installed facade.
  env "${lua_env[@]}" "$luajit" - <<'LUA'
local sluice = require "sluice"
assert(type(sluice) == "table", "require 'sluice' returned " .. type(sluice))
if sluice.range then
  local p = sluice.range(5)
  if p.map then p = p:map(function(s) return s end, { threads = 2 }) end
  local n = 0
  for _ in p:iter() do n = n + 1 end
  assert(n == 5, "range(5) gave " .. n .. " samples")
  print("sluice.range(5)" .. (p.map and ":map(identity)" or "") .. ": 5 samples")
end
LUA
else
  echo "no lua/sluice/init.lua installed (the facade has not landed)"
fi

step "embedding API from the prefix (no LUA_PATH/LUA_CPATH)"
# shellcheck disable=SC2046,SC2086 # pkg-config output is meant to split
"$cc" -std=c11 -Wall -Wextra -Werror $san_cflags "$here/embed.c" \
  $(pkg-config --cflags --libs sluice) -Wl,--disable-new-dtags,-rpath,"$pc_libdir" \
  -o "$tmp/embed"
env -u LUA_PATH -u LUA_CPATH "$tmp/embed"
# A LUA_PATH that cannot find sluice (the user's own modules only): the
# prefix's Lua folder is appended (src/script/lua_path.c).
mkdir -p "$tmp/own"
env -u LUA_CPATH LUA_PATH="$tmp/own/?.lua" "$tmp/embed"

step "the demo trainer from the prefix, with the installed sluice command"
# examples/trainer as a user builds it: pkg-config, the installed library and
# Lua modules (found from the library's location), data packed with the
# installed `sluice`.  A short run: the t10k set stands in for the training
# set, a few batches per epoch.
fmnist=${SLUICE_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -r "$fmnist/t10k-images-idx3-ubyte.gz" ] ||
  { echo "missing $fmnist: install the dataset-fashion-mnist package"; exit 1; }
mkdir -p "$tmp/data"
"$prefix/bin/sluice" pack idx "$fmnist/t10k-images-idx3-ubyte.gz" \
  "$fmnist/t10k-labels-idx1-ubyte.gz" -o "$tmp/data/t10k.slr" -q
cp "$tmp/data/t10k.slr" "$tmp/data/train.slr"
# shellcheck disable=SC2046,SC2086 # pkg-config output is meant to split
"$cc" -std=c11 -O2 -Wall -Wextra -Werror $san_cflags \
  "$here/../../examples/trainer/trainer.c" \
  $(pkg-config --cflags --libs sluice) -lm -Wl,--disable-new-dtags,-rpath,"$pc_libdir" \
  -o "$tmp/trainer"
env -u LUA_PATH -u LUA_CPATH "$tmp/trainer" --epochs 1 --limit 10 \
  --script "$here/../../examples/fashion_mnist.lua" --data "$tmp/data" \
  | tee "$tmp/trainer.out"
grep -Eq '^epoch=1 loss=[0-9.]+ test_acc=0\.[0-9]+ wait=[0-9.]+ step_us=[0-9.]+ cached_step_us=[0-9.]+ interference=[0-9.]+$' \
  "$tmp/trainer.out" || { echo "trainer printed no epoch line"; exit 1; }

step "installed example plugins"
# The example parser plugins go to LIBDIR/sluice/plugins and load into the
# installed `sluice` (pack text --parser).
for plugin in csv_floats tokenize; do
  f=$libdir/sluice/plugins/lib$plugin.so
  [ -e "$prefix/$f" ] || { echo "missing from the install: $f"; exit 1; }
  echo "installed: $f"
done
# The sl__ functions of sluice's own tools are not an API.
[ ! -e "$prefix/include/sluice/unstable.h" ] ||
  { echo "installed, but internal: include/sluice/unstable.h"; exit 1; }
printf '1,2,3\n4.5, 6 ,7\n' >"$tmp/floats.csv"
cat >"$tmp/plugin.lua" <<'LUA'
local plugin, csv = ...
local p = require("sluice").open("text:" .. csv,
                                 { parser = plugin, parser_options = "n=3" })
local xs = {}
for s in p:iter() do xs[#xs + 1] = require("sluice").totable(s).x[2] end
assert(#xs == 2 and xs[2] == 6, "csv_floats gave " .. table.concat(xs, ","))
print("csv_floats: 2 lines, second column " .. table.concat(xs, ","))
return require("sluice").range(1)
LUA
env -u LUA_PATH -u LUA_CPATH "$prefix/bin/sluice" run "$tmp/plugin.lua" \
  "$prefix/$libdir/sluice/plugins/libcsv_floats.so" "$tmp/floats.csv"

step "LD_LIBRARY_PATH at another sluice prefix (a decoy)"
# A user with two sluice versions installed: whatever LD_LIBRARY_PATH says,
# the installed module, command and plugins bind to the libsluice of their
# own prefix (DT_RPATH $ORIGIN/..., which the loader searches before
# LD_LIBRARY_PATH; a DT_RUNPATH would lose to it).
decoy=$tmp/decoy
cmake --install "$build" --prefix "$decoy" >"$tmp/install-decoy.log" ||
  { cat "$tmp/install-decoy.log"; exit 1; }
real_prefix=$(cd "$prefix" && pwd -P)
export LD_LIBRARY_PATH=$decoy/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The installed files, and the programs built above against the prefix as
# README.md says (-Wl,--disable-new-dtags,-rpath,LIBDIR).
for f in "$prefix/bin/sluice" \
         "$prefix/$libdir/sluice/plugins/libcsv_floats.so" \
         "$prefix/$libdir/sluice/plugins/libtokenize.so" \
         "$tmp/consumer_pc" "$tmp/cmake-build/consumer" "$tmp/embed" \
         "$tmp/trainer"; do
  got=$(ldd "$f" | awk '$1 ~ /^libsluice\.so/ { print $3 }')
  case "$(cd "$(dirname "$got")" 2>/dev/null && pwd -P)" in
  "$real_prefix"/*) echo "${f#"$tmp"/} binds $got" ;;
  *) echo "${f#"$tmp"/} binds '$got', not the libsluice under $prefix"; exit 1 ;;
  esac
done
"$tmp/consumer_pc"
env -u LUA_PATH -u LUA_CPATH "$tmp/embed"
# The facade under plain luajit: the installed sluice.library names the
# prefix's libsluice by path, which LD_LIBRARY_PATH cannot redirect.
env "${lua_env[@]}" "$luajit" "$tmp/loaded_from.lua" "$real_prefix"
# `sluice run` finds its Lua modules from the libsluice it loaded: the
# script reports which one that is.
cat >"$tmp/which.lua" <<'LUA'
for line in io.lines("/proc/self/maps") do
  local path = line:match("%s(/%S*libsluice%.so[%.%d]*)$")
  if path then io.stdout:write("libsluice: ", path, "\n") break end
end
return require("sluice").range(3)
LUA
env -u LUA_PATH -u LUA_CPATH "$prefix/bin/sluice" run "$tmp/which.lua" \
  | tee "$tmp/which.out"
grep -q "^libsluice: $real_prefix/" "$tmp/which.out" ||
  { echo "sluice run used another libsluice than $prefix's"; exit 1; }
unset LD_LIBRARY_PATH

step "a moved prefix"
# sluice.library resolves its relative path where it lies now.
mv "$prefix" "$tmp/moved"
moved=$(cd "$tmp/moved" && pwd -P)
lua_env[0]="LUA_PATH=$moved/$lua_dir/?.lua;$moved/$lua_dir/?/init.lua"
env "${lua_env[@]}" "$luajit" "$tmp/loaded_from.lua" "$moved"
mv "$tmp/moved" "$prefix"

step "installed Lua files"
src_lua=$here/../../lua
if [ -d "$src_lua/sluice" ]; then
  while IFS= read -r f; do
    rel=${f#"$src_lua"/}
    [ -e "$prefix/$lua_dir/$rel" ] ||
      { echo "missing from the install: $lua_dir/$rel"; exit 1; }
    echo "installed: $lua_dir/$rel"
  done < <(find "$src_lua/sluice" -name '*.lua' | sort)
fi

echo
echo "install.consumer: ok"
