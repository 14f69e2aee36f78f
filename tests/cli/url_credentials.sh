# url_credentials.sh - a URL's user:password is never shown: not in an
# error (a refused connection, a usage error), not in what verify and
# inspect print about a file they read over HTTP (issue 24, item 14).
. "$(dirname "$0")/lib.bash"

export SLUICE_HTTP_RETRIES=0
for cmd in cat inspect verify; do
  sl $cmd "http://bob:pw-cli-1@127.0.0.1:1/x.slr"
  expect_rc 1 "sluice $cmd of an unreachable URL"
  contains "$ERR" "http://***@127.0.0.1:1/x.slr" "stderr of sluice $cmd"
  not_contains "$ERR$OUT" "pw-cli-1" "sluice $cmd's output"
  not_contains "$ERR$OUT" "bob" "sluice $cmd's output"
done
sl inspect "http://bob:pw-cli-2@h/a.slr" "https://eve:pw-cli-3@h/b.slr"
expect_rc 2 "inspect with two URLs"
contains "$ERR" "'http://***@h/a.slr' and 'https://***@h/b.slr'"
not_contains "$ERR" "pw-cli-"

# A file served over HTTP (Python's http.server: no ranges, read whole).
printf 'one\ntwo\n' > in.txt
"$SLUICE" pack text in.txt -o ok.slr -q || fail "pack text in.txt"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server "$PORT" --bind 127.0.0.1 >/dev/null 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -rf "$TMP"' EXIT
for i in $(seq 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT))" \
    2>/dev/null && break
  sleep 0.1
done
URL="http://bob:pw-cli-4@127.0.0.1:$PORT/ok.slr"
sl verify "$URL"
expect_rc 0 "verify over HTTP"
contains "$OUT" "http://***@127.0.0.1:$PORT/ok.slr: ok (2 records"
sl inspect "$URL"
expect_rc 0 "inspect over HTTP"
contains "$OUT" "file:      http://***@127.0.0.1:$PORT/ok.slr"
sl inspect --json "$URL"
expect_rc 0 "inspect --json over HTTP"
contains "$OUT" "\"file\":\"http://***@127.0.0.1:$PORT/ok.slr\""
not_contains "$OUT" "pw-cli-4"
sl cat "$URL"
expect_rc 0 "cat over HTTP"
contains "$OUT" "two"
echo "ok"
