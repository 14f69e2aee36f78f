# without_layers.sh - a libsluice built without a layer (cmake
# -DSLUICE_WITH_LUA=OFF / -DSLUICE_WITH_IMAGES=OFF) says so: `sluice run`
# and `sluice pack images` fail at once (exit 1) naming the option (the
# `image:` tag of sl_open: tests/test_registry.c), and neither libsluice nor
# the command needs LuaJIT, TurboJPEG or libspng (readelf -d).  Registered only in such
# a build; CTest passes SLUICE_WITH_LUA and SLUICE_WITH_IMAGES (1 or 0).
. "$(dirname "$0")/lib.bash"

checked=0
if [ "${SLUICE_WITH_LUA:-1}" = 0 ]; then
  printf 'return 1\n' >p.lua
  sl run p.lua
  expect_rc 1 "run without Lua"
  contains "$ERR" "p.lua: this libsluice" "run stderr"
  contains "$ERR" "was built without Lua (cmake -DSLUICE_WITH_LUA=OFF: no LuaJIT)" "run stderr"
  checked=$((checked + 1))
fi
if [ "${SLUICE_WITH_IMAGES:-1}" = 0 ]; then
  mkdir -p imgs/a
  printf '\377\330\377' >imgs/a/x.jpg
  sl pack images imgs -o out.slr
  expect_rc 1 "pack images without images"
  contains "$ERR" "pack images: this libsluice" "pack images stderr"
  contains "$ERR" "was built without image support (cmake -DSLUICE_WITH_IMAGES=OFF" "pack images stderr"
  [ ! -e out.slr ] || fail "pack images left out.slr"
  checked=$((checked + 1))
fi
# Nor does the library (or the command) link what the layer would need.
lib=$(dirname "$SLUICE")/../libsluice.so
[ -e "$lib" ] || fail "no $lib beside the sluice command"
for f in "$lib" "$SLUICE"; do
  needed=$(readelf -d "$f" | grep NEEDED) || fail "readelf -d $f"
  if [ "${SLUICE_WITH_LUA:-1}" = 0 ]; then
    not_contains "$needed" "luajit" "$f NEEDED"
  fi
  if [ "${SLUICE_WITH_IMAGES:-1}" = 0 ]; then
    not_contains "$needed" "turbojpeg" "$f NEEDED"
    not_contains "$needed" "spng" "$f NEEDED"
  fi
done
[ "$checked" -gt 0 ] || fail "registered in a build that has every layer"
