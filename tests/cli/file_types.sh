# file_types.sh - `sluice verify`, `cat` and `inspect` on what is not a
# regular file: a directory, /dev/null, /dev/zero and a FIFO each fail at
# once (exit 1) with a message saying what the path is, never a stale
# "Success", and the FIFO never hangs (issue 13).  A file literally named
# "[a].slr" opens.  A 2000-byte path keeps the reason at the end of the
# message.
. "$(dirname "$0")/lib.bash"
MKSLR="$(dirname "$SLUICE")/sluice_test_mkslr"
[ -x "$MKSLR" ] || fail "helper $MKSLR is not built"

mkdir dir.slr
mkfifo fifo.slr || fail "mkfifo failed"
for cmd in verify cat inspect; do
  for p in dir.slr /dev/null /dev/zero fifo.slr; do
    # timeout: a FIFO opened without O_NONBLOCK would block forever.
    run timeout 20 "$SLUICE" "$cmd" "$p"
    [ "$RC" -ne 124 ] || fail "$cmd $p hung"
    expect_rc 1 "$cmd $p"
    not_contains "$ERR" "Success" "$cmd $p stderr"
    case "$p" in
    dir.slr) want="sluice: $cmd: dir.slr: is a directory, not a regular file" ;;
    fifo.slr) want="sluice: $cmd: fifo.slr: is a FIFO (named pipe), not a regular file" ;;
    *) want="sluice: $cmd: $p: is a character device, not a regular file" ;;
    esac
    contains "$ERR" "$want" "$cmd $p stderr"
  done
done

# A literal name that looks like a glob.
"$MKSLR" '[a].slr' || fail "mkslr failed"
sl verify '[a].slr'
expect_rc 0 "verify [a].slr"
contains "$OUT" "[a].slr: ok (2 records, 1 chunks)"

# A long path: the message is shortened in the middle, the reason stays.
long=$(printf 'd%.0s' $(seq 1 200))
p=.
for i in $(seq 1 9); do p="$p/$long"; done
mkdir -p "$p" || fail "mkdir of a long path failed"
sl verify "$p/missing.slr"
expect_rc 1 "verify of a missing file under a long path"
contains "$ERR" "missing.slr: cannot open: No such file or directory" \
  "verify stderr"
echo "file_types: ok"
