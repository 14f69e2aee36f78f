# cat_types.sh - `sluice cat` and `inspect` on a file with a field of every
# kind (written by mkslr, built beside the sluice binary): floats in their
# shortest exact form with NaN/inf as null, f16 (a subnormal too) and bf16
# as floats, bool, a variable-shape tensor nested by each record's own
# shape, bytes as a JSON string, 64-bit extremes, a zero dimension.
. "$(dirname "$0")/lib.bash"
MKSLR="$(dirname "$SLUICE")/sluice_test_mkslr"
[ -x "$MKSLR" ] || fail "helper $MKSLR is not built"
"$MKSLR" types.slr || fail "mkslr failed"

sl cat --json types.slr
expect_rc 0 "cat --json"
cat > want.json <<'W'
{"f":[[0.5,-1.25,3],[0.001,null,null]],"h":[1,-2.5,5.9604645e-08],"bf":1.5,"b":[true,false,true],"v":[[1,-2],[3,4]],"s":"hé\n","u":18446744073709551615,"i":-9223372036854775808,"d":0.1,"z":[[],[]]}
{"f":[[0.1,0,-0],[1e+30,1e-30,2]],"h":[null,0.33325195,0],"bf":-123.5,"b":[false,false,false],"v":[],"s":"","u":0,"i":-1,"d":1e+300,"z":[[],[]]}
W
printf '%s\n' "$OUT" > got.json
cmp -s got.json want.json || fail "cat --json: $(diff got.json want.json)"

sl cat types.slr
expect_rc 0 "cat"
cat > want.txt <<'W'
#0 f=f32[2,3] [0.5 -1.25 3 0.001 nan -inf] h=f16[3] [1 -2.5 5.96046e-08] bf=1.5 b=bool[3] [true false true] v=i32[2,2] [1 -2 3 4] s="hé\n" u=18446744073709551615 i=-9223372036854775808 d=0.1 z=u16[2,0] []
#1 f=f32[2,3] [0.1 0 -0 1e+30 1e-30 2] h=f16[3] [inf 0.333252 0] bf=-123.5 b=bool[3] [false false false] v=i32[0,2] [] s="" u=0 i=-1 d=1e+300 z=u16[2,0] []
W
printf '%s\n' "$OUT" > got.txt
cmp -s got.txt want.txt || fail "cat: $(diff got.txt want.txt)"

sl inspect --json types.slr
expect_rc 0 "inspect --json"
contains "$OUT" '{"name":"v","dtype":"i32","shape":[-1,2]}'
contains "$OUT" '{"name":"s","dtype":"bytes","shape":[-1]}'
contains "$OUT" '{"name":"z","dtype":"u16","shape":[2,0]}'
# (then the writer's own sluice.* entries: FORMAT.md)
contains "$OUT" '"metadata":{"note":"tab\there","sluice.max_chunk_raw":'
contains "$OUT" '"records":2,"chunks":1,'
sl verify types.slr
expect_rc 0 "verify"
echo "cat_types: ok"
