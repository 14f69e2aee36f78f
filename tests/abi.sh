#!/usr/bin/env bash
# tests/abi.sh - what libsluice.so exports (CTest: abi).
#
#   usage: abi.sh HEADER LIBRARY      (include/sluice.h, libsluice.so)
#          abi.sh INCLUDE_DIR LIBRARY (include/: sluice.h and sluice/*.h,
#                                      unstable.h among them, read as one)
#          abi.sh --self-test
#
# libsluice is built with hidden visibility; SL_API marks what it exports.
# Besides the public sl_* functions it exports a few internal sl__ ones for
# sluice's own CLI and Lua facade (through the FFI), and every one of them must be named in
# the header's unstable section (between the lines "BEGIN UNSTABLE" and
# "END UNSTABLE"; a name counts where it is written "sl__name(").  The
# section declares most of them (SL_API prototypes) and may list others in
# a comment: exported by an internal header, tolerated until they lose
# their mark.  Checks:
#   - every exported sl__ symbol is named in the unstable section;
#   - every sl__ function the section declares SL_API is exported (a stale
#     entry), except, in a build without the Lua layer (SLUICE_WITH_LUA=0
#     in the environment), those of the Lua host (sl__lua_*, sl__shipped_*);
#   - every other exported symbol is an sl_ function the header declares
#     outside the unstable section.
# Exit 0 when all hold; 1 with one line per violation, naming the symbol.
set -euo pipefail

# The names "sl__name(" between the markers of HEADER, one per line.
unstable_names() {
  sed -n '/BEGIN UNSTABLE/,/END UNSTABLE/p' "$1" |
    grep -o 'sl__[A-Za-z0-9_]*(' | tr -d '(' | sort -u
}

# The names the section declares: "SL_API ... sl__name(" on one line.
declared_names() {
  sed -n '/BEGIN UNSTABLE/,/END UNSTABLE/p' "$1" | grep '^SL_API ' |
    grep -o 'sl__[A-Za-z0-9_]*(' | tr -d '(' | sort -u
}

# The function names "sl_name(" of HEADER outside the unstable section.
public_names() {
  sed '/BEGIN UNSTABLE/,/END UNSTABLE/d' "$1" |
    grep -o '\bsl_[A-Za-z0-9_]*(' | tr -d '(' | sort -u
}

# check HEADER SYMBOLS: SYMBOLS holds the exported names, one per line.
check() {
  local header=$1 symbols=$2 bad=0 s
  local listed declared public
  listed=$(unstable_names "$header")
  declared=$(declared_names "$header")
  public=$(public_names "$header")
  if [ -z "$listed" ]; then
    echo "abi: $header has no unstable section (BEGIN UNSTABLE ... END UNSTABLE)"
    return 1
  fi
  while read -r s; do
    [ -n "$s" ] || continue
    case "$s" in
      sl__*)
        if ! grep -qx "$s" <<<"$listed"; then
          echo "abi: the library exports $s, which the unstable section of" \
            "$header does not name: declare it there (SL_API) if sluice's" \
            "CLI or Lua facade needs it, else drop its SL_API"
          bad=1
        fi
        ;;
      *)
        if ! grep -qx "$s" <<<"$public"; then
          echo "abi: the library exports $s, which $header does not" \
            "declare: declare it (SL_API) or drop its SL_API"
          bad=1
        fi
        ;;
    esac
  done <"$symbols"
  while read -r s; do
    if [ "${SLUICE_WITH_LUA:-1}" = 0 ]; then
      case "$s" in sl__lua_* | sl__shipped_*) continue ;; esac
    fi
    if ! grep -qx "$s" "$symbols"; then
      echo "abi: the unstable section of $header declares $s, which the" \
        "library does not export: remove it from the section"
      bad=1
    fi
  done <<<"$declared"
  return $bad
}

# self_case WHAT EXPECT SYMBOLS...: check the self-test header against the
# export list SYMBOLS; EXPECT is "pass", or a text the output must contain.
self_case() {
  local what=$1 expect=$2 out rc=0
  shift 2
  printf '%s\n' "$@" >"$dir/symbols"
  out=$(check "$dir/h.h" "$dir/symbols") || rc=1
  if [ "$expect" = pass ]; then
    [ $rc = 0 ] && return 0
    echo "self-test: $what fails: $out"
  else
    [ $rc = 1 ] && grep -qF "$expect" <<<"$out" && return 0
    echo "self-test: $what: expected a failure saying '$expect', got: $out"
  fi
  return 1
}

self_test() {
  local dir
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' RETURN
  cat >"$dir/h.h" <<'EOF'
SL_API int sl_open(const char *p);
/* BEGIN UNSTABLE */
SL_API int sl__pack_idx(int a);
SL_API int sl__lua_stage(int a);
/* exported, not declared: sl__lua_pcall() */
/* END UNSTABLE */
EOF
  self_case "a matching export list" pass \
    sl_open sl__pack_idx sl__lua_stage sl__lua_pcall || return 1
  self_case "a stray sl__ export" "exports sl__stray," \
    sl_open sl__pack_idx sl__lua_stage sl__lua_pcall sl__stray || return 1
  self_case "a stale entry" "declares sl__pack_idx," \
    sl_open sl__lua_stage sl__lua_pcall || return 1
  self_case "a listed name that lost its export" pass \
    sl_open sl__pack_idx sl__lua_stage || return 1
  SLUICE_WITH_LUA=0 self_case "a build without Lua" pass \
    sl_open sl__pack_idx || return 1
  self_case "an undeclared sl_ export" "exports sl_hidden_helper," \
    sl_open sl_hidden_helper sl__pack_idx sl__lua_stage || return 1
  echo "abi.sh self-test: ok"
}

if [ "${1:-}" = --self-test ]; then
  self_test
  exit
fi
if [ $# -ne 2 ]; then
  echo "usage: $0 HEADER LIBRARY | --self-test" >&2
  exit 2
fi
self_test >/dev/null
symbols=$(mktemp)
header=$1
if [ -d "$1" ]; then
  header=$(mktemp)
  cat "$1"/sluice.h "$1"/sluice/*.h >"$header"
fi
trap 'rm -f "$symbols"; [ "$header" = "$1" ] || rm -f "$header"' EXIT
# Defined, dynamic, global: what another object can bind to.
nm -D --defined-only "$2" | awk '$2 ~ /^[A-Z]$/ { print $3 }' |
  sed 's/@.*//' | sort -u >"$symbols"
if ! [ -s "$symbols" ]; then
  echo "abi: nm -D found no exported symbol in $2"
  exit 1
fi
if check "$header" "$symbols"; then
  echo "abi: $2 exports $(grep -c '^sl_[^_]' "$symbols") sl_ functions and" \
    "$(grep -c '^sl__' "$symbols") sl__ ones, all named in $1"
  exit 0
fi
exit 1
