# lib.bash - shared by the CLI tests (tests/cli/*.sh; this file is not a
# test itself).  Each test runs as `bash test.sh path/to/sluice`, in a
# private temporary directory removed at exit, and fails with a message
# saying what was expected.

set -u
export LC_ALL=C # byte semantics for grep/sed, and fast
SLUICE=${1:?usage: $0 path/to/sluice}
case "$SLUICE" in /*) ;; *) SLUICE="$PWD/$SLUICE" ;; esac
DATA=${SLUICE_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice_cli.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1

fail() {
  echo "FAIL: $*" >&2
  [ -n "${OUT+x}" ] && printf 'last stdout:\n%s\n' "${OUT:0:2000}" >&2
  [ -n "${ERR+x}" ] && printf 'last stderr:\n%s\n' "${ERR:0:2000}" >&2
  exit 1
}

# The real data is a dependency (Debian's dataset-fashion-mnist): missing
# data fails the test, it never skips it.
need_data() {
  local f
  for f in t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -r "$DATA/$f" ] || fail "Fashion-MNIST is missing ($DATA/$f):" \
      "install the Debian package dataset-fashion-mnist" \
      "(apt-get install dataset-fashion-mnist, or make deps)"
  done
}

# run CMD ARGS...: runs it, sets RC, OUT (stdout) and ERR (stderr).
run() {
  "$@" >"$TMP/.out" 2>"$TMP/.err"
  RC=$?
  OUT=$(cat "$TMP/.out")
  ERR=$(cat "$TMP/.err")
}

# sl ARGS...: run the sluice binary.
sl() { run "$SLUICE" "$@"; }

expect_rc() {
  [ "$RC" -eq "$1" ] || fail "expected exit status $1, got $RC: ${2:-}"
}

# contains HAYSTACK NEEDLE [what]
contains() {
  case "$1" in *"$2"*) ;; *) fail "${3:-output} does not contain '$2'" ;; esac
}

not_contains() {
  case "$1" in *"$2"*) fail "${3:-output} contains '$2'" ;; *) ;; esac
}

# The labels of the t10k set, one per line (the idx header is 8 bytes).
t10k_labels() {
  zcat "$DATA/t10k-labels-idx1-ubyte.gz" | tail -c +9 | od -An -v -tu1 -w1 |
    tr -d ' '
}

# The "label" values of an SLR file's records, one per line.
slr_labels() {
  "$SLUICE" cat --json "$1" | grep -o '"label":[0-9-]*}$' | tr -dc '0-9\n-'
}

# demo_data BUILD: prints the folder holding the demo's train.slr and
# t10k.slr: BUILD/data when `make demo` or CTest's demo.short packed them
# there, else $TMP/data, packed now from Fashion-MNIST.
demo_data() {
  local dir=$1/data s
  if ! [ -s "$dir/train.slr" ] || ! [ -s "$dir/t10k.slr" ]; then
    need_data
    dir=$TMP/data
    mkdir -p "$dir"
    for s in train t10k; do
      "$SLUICE" pack idx -q "$DATA/$s-images-idx3-ubyte.gz" \
        "$DATA/$s-labels-idx1-ubyte.gz" -o "$dir/$s.slr" ||
        fail "packing $s"
    done
  fi
  printf '%s\n' "$dir"
}
