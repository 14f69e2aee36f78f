# synopsis.sh - the command forms agree everywhere they are listed: the
# "Usage:" lines of `sluice --help` are exactly the synopsis at the top of
# docs/CLI.md, and every subcommand's own usage lines (`sluice pack --help`,
# `sluice pack tokens --help`, `sluice run --help`, ...) are among them
# (issue 24 item 22: `pack tokens` and `run --stats` were missing).
SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/lib.bash"

# norm: the lines that start with "sluice " (after blanks and an optional
# "usage: "), each with its continuation lines (more indented, not starting
# with "sluice") joined, blanks collapsed; sorted.
norm() {
  awk '
    { sub(/^[ \t]*(usage: )?/, "") }
    /^sluice / { if (cur != "") print cur; cur = $0; next }
    cur != "" && /^\[/ { cur = cur " " $0; next }
    { if (cur != "") print cur; cur = "" }
    END { if (cur != "") print cur }' | tr -s ' ' | sort -u
}
# usage_lines: the lines after "Usage:" up to the first blank line.
usage_lines() { awk '/^Usage:/ { on = 1; next } on && /^$/ { exit } on'; }

# The synopsis of docs/CLI.md: its first fenced block.
doc=$(awk '/^```/ { n++; next } n == 1' "$SRC/docs/CLI.md" | norm)
[ -n "$doc" ] || fail "no synopsis block at the top of docs/CLI.md"

sl --help
expect_rc 0 "sluice --help"
top=$(printf '%s\n' "$OUT" | usage_lines | norm)
[ "$top" = "$doc" ] ||
  fail "the usage of 'sluice --help' and the synopsis of docs/CLI.md differ:" \
    "$(diff <(printf '%s\n' "$top") <(printf '%s\n' "$doc") | sed 's/^</  sluice --help:/; s/^>/  docs\/CLI.md: /')"

# Every pack format the dispatcher knows, and every command.
for sub in "pack" "pack idx" "pack text" "pack images" "pack wds" "pack tokens" \
  "inspect" "verify" "cat" "run"; do
  # shellcheck disable=SC2086
  sl $sub --help
  expect_rc 0 "sluice $sub --help"
  own=$(printf '%s\n' "$OUT" | norm)
  [ -n "$own" ] || fail "sluice $sub --help shows no usage line"
  while IFS= read -r line; do
    grep -qxF -- "$line" <<<"$doc" ||
      fail "sluice $sub --help lists '$line', which docs/CLI.md's synopsis and" \
        "sluice --help do not"
  done <<<"$own"
  grep -q "^sluice $sub" <<<"$own" ||
    fail "sluice $sub --help has no usage line for 'sluice $sub'"
done

# The pack formats named in the synopsis are those `sluice pack` accepts.
for fmt in idx text images wds tokens; do
  grep -q "^sluice pack $fmt " <<<"$doc" || fail "docs/CLI.md's synopsis lacks 'sluice pack $fmt'"
done
sl pack frobnicate x -o y
expect_rc 2 "sluice pack frobnicate"
contains "$ERR" "wds or tokens" "stderr of 'sluice pack frobnicate' (the formats it lists)"
sl pack --help
contains "$OUT" "tokens" "sluice pack --help (its formats)"
sl --help
contains "$OUT" "--stats" "sluice --help"
