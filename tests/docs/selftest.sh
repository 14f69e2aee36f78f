#!/usr/bin/env bash
# selftest.sh PYTHON SOURCE BUILD SLUICE - CTest docs.harness: the doc-example
# harness (tests/docs/run_examples.py) fails on what it must fail on, and
# passes, with its counts, what it must pass.  Each case is a small Markdown
# file written here; the harness runs it against the real build.
set -u
py=$1 src=$2 build=$3 sluice=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice_docs_selftest.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0

# case NAME WANT_RC WANT_TEXT: runs the harness on $tmp/NAME.md (stdin).
case_() {
  local name=$1 want_rc=$2 want=$3 out rc
  cat > "$tmp/$name.md"
  out=$("$py" "$src/tests/docs/run_examples.py" "$tmp/$name.md" --source "$src" \
    --build "$build" --sluice "$sluice" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL: $name: exit status $rc, expected $want_rc; output:"; echo "$out"
    fails=$((fails + 1))
  elif ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: $name: the output lacks '$want'; output:"; echo "$out"
    fails=$((fails + 1))
  else
    echo "ok: $name"
  fi
}

case_ good 0 "7 blocks: 5 passed, 0 failed, 1 marked skip, 0 not runnable here (binding or module missing), 1 listings" <<'MD'
# good

<!-- doctest: prelude-all lua
local sluice = require "sluice"
-->
<!-- doctest: stdout
0
1
2
-->
```lua
for s in sluice.range(3):iter() do print(s.i) end
```

A listing is never run:

```
sluice frobnicate --no-such-option
```

<!-- doctest: skip needs a GPU -->
```lua
error("never run")
```

<!-- doctest: prelude
#include <sluice.h>
int main(void) {
-->
<!-- doctest: after
  return sl_reader_destroy(r), 0;
}
-->
```c
sl_reader *r;
if (sl_reader_range(3, &r) != SL_OK) return 1;
```

```console
$ sluice verify data/train.slr
data/train.slr: ok
$ sluice verify no-such.slr
$ echo $?
1
```

```json
{"a": [1, 2]}
```

<!-- doctest: file script.lua -->
<!-- doctest: run sluice run --limit 1 script.lua 4 -->
```lua
local sluice = require "sluice"
return sluice.range(10):batch(tonumber((...)))
```
MD

case_ stale 1 "stale.md:5: [lua] exit status 1" <<'MD'
# stale

An example that no longer runs fails, naming its line:

```lua
local sluice = require "sluice"
sluice.open("data/train.slr"):batch(0)
```
MD

case_ stdout 1 "stdout differs" <<'MD'
<!-- doctest: stdout
4
-->
```lua
print(2 + 1)
```
MD

case_ warning 1 "unused variable" <<'MD'
<!-- doctest: file stale.c -->
```c
#include <sluice.h>
int main(void) { int unused; return 0; }
```
MD

case_ console 1 "exited 1, not 0" <<'MD'
```console
$ sluice verify no-such.slr
```
MD

case_ status 1 "exited 2, not 1" <<'MD'
```console
$ sluice verify
$ echo $?
1
```
MD

case_ session 1 "a shell session in a block with no language" <<'MD'
```
$ sluice inspect t10k.slr
```
MD

case_ cpp 1 "no runner for that language" <<'MD'
```cpp
int main() {}
```
MD

case_ excerpt 1 "not an excerpt of include/sluice.h" <<'MD'
<!-- doctest: excerpt include/sluice.h -->
```c
int sl_reader_range(uint64_t n, sl_reader **out, int extra);
```
MD

case_ link 1 "gone.md: no such file in the repository" <<'MD'
See [the old page](gone.md).
MD

case_ outside 1 "a link out of the repository" <<'MD'
See [elsewhere](https://example.com/design.md).
MD

case_ orphan 2 "not followed by a code block" <<'MD'
<!-- doctest: skip a reason -->
Some prose instead of a block.
MD

case_ noreason 2 "doctest: skip needs an argument" <<'MD'
<!-- doctest: skip -->
```lua
print(1)
```
MD

case_ unknown 2 "unknown doctest marker 'skipp'" <<'MD'
<!-- doctest: skipp a typo -->
```lua
print(1)
```
MD

case_ listing 2 "before a block with no language" <<'MD'
<!-- doctest: skip a listing -->
```
text
```
MD

[ "$fails" -eq 0 ] || { echo "$fails case(s) failed"; exit 1; }
echo "all cases passed"
