#!/usr/bin/env python3
"""s3_server.py - a tiny S3-compatible server for tests/test_s3.c.

Standard library only.  Serves the files under ROOT as the objects of one
bucket, path style (GET/HEAD /BUCKET/KEY), with Range support (206, and 416
past the end), an ETag (the MD5 of the body, quoted) and Last-Modified.

Every request must carry an AWS Signature Version 4 Authorization header;
the server checks it with its own implementation of AWS's published
algorithm (canonical request, string to sign, HMAC-SHA256 signing key
derived from the secret, date, region and service), independent of the
client's (libcurl's).  A wrong signature is 403 SignatureDoesNotMatch, an
unknown key 403 InvalidAccessKeyId, a missing or malformed header 403
AccessDenied, a request dated more than 15 minutes away 403
RequestTimeTooSkewed; with a session token configured, the request must
carry it as a signed x-amz-security-token header.

Usage: s3_server.py PORT ROOT BUCKET ACCESS_KEY SECRET REGION [TOKEN]
It listens on 127.0.0.1:PORT until killed, and appends one line per request
(method, path, Range, status) to the file S3_SERVER_LOG names, when set.
"""
import datetime
import email.utils
import hashlib
import hmac
import http.server
import os
import sys
import urllib.parse

PORT, ROOT, BUCKET, ACCESS, SECRET, REGION = sys.argv[1:7]
TOKEN = sys.argv[7] if len(sys.argv) > 7 else None
LOG = os.environ.get("S3_SERVER_LOG")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def hmac_sha256(key, msg):
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret, date, region, service):
    k = hmac_sha256(("AWS4" + secret).encode("utf-8"), date)
    k = hmac_sha256(k, region)
    k = hmac_sha256(k, service)
    return hmac_sha256(k, "aws4_request")


def canonical_query(query):
    if not query:
        return ""
    pairs = []
    for part in query.split("&"):
        k, _, v = part.partition("=")
        pairs.append((k, v))
    pairs.sort()
    return "&".join(k + "=" + v for k, v in pairs)


def check_signature(method, raw_path, headers):
    """Returns None when the request is signed right, else (code, message)."""
    auth = headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return ("AccessDenied", "no AWS4-HMAC-SHA256 Authorization header")
    fields = {}
    for item in auth[len("AWS4-HMAC-SHA256 "):].split(","):
        k, _, v = item.strip().partition("=")
        fields[k] = v
    try:
        key_id, date, region, service, term = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        signature = fields["Signature"]
    except (KeyError, ValueError):
        return ("AccessDenied", "malformed Authorization header")
    if key_id != ACCESS:
        return ("InvalidAccessKeyId", "unknown access key " + key_id)
    if region != REGION or service != "s3" or term != "aws4_request":
        return ("AuthorizationHeaderMalformed",
                "credential scope %s/%s/%s" % (region, service, term))
    if "host" not in signed or "x-amz-date" not in signed:
        return ("AccessDenied", "host and x-amz-date must be signed")
    amz_date = headers.get("x-amz-date", "")
    try:
        when = datetime.datetime.strptime(
            amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return ("AccessDenied", "bad x-amz-date " + amz_date)
    now = datetime.datetime.now(datetime.timezone.utc)
    if abs((now - when).total_seconds()) > 900 or amz_date[:8] != date:
        return ("RequestTimeTooSkewed", "x-amz-date " + amz_date)
    if TOKEN is not None and ("x-amz-security-token" not in signed or
                              headers.get("x-amz-security-token") != TOKEN):
        return ("InvalidToken", "the session token is missing or wrong")
    path, _, query = raw_path.partition("?")
    canon_headers = ""
    for name in signed:
        value = headers.get(name)
        if value is None:
            return ("AccessDenied", "signed header %s is absent" % name)
        canon_headers += name + ":" + " ".join(value.split()) + "\n"
    payload = headers.get("x-amz-content-sha256", EMPTY_SHA256)
    canonical = "\n".join([method, path, canonical_query(query),
                           canon_headers, ";".join(signed), payload])
    scope = "/".join([date, region, service, term])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    want = hmac.new(signing_key(SECRET, date, region, service),
                    to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, signature):
        return ("SignatureDoesNotMatch",
                "the signature does not match (canonical request: %r)"
                % canonical)
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def note(self, status):
        if LOG:
            with open(LOG, "a") as f:
                f.write("%s %s %s %d\n" % (self.command, self.path,
                                           self.headers.get("Range", "-"),
                                           status))

    def error(self, status, code, message):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s"
                "</Code><Message>%s</Message></Error>\n"
                % (code, message.replace("&", "&amp;").replace("<", "&lt;")))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.note(status)

    def serve(self):
        bad = check_signature(self.command, self.path, self.headers)
        if bad:
            return self.error(403, bad[0], bad[1])
        path = urllib.parse.unquote(self.path.partition("?")[0])
        bucket, _, key = path.lstrip("/").partition("/")
        if bucket != BUCKET:
            return self.error(404, "NoSuchBucket", bucket)
        file = os.path.realpath(os.path.join(ROOT, key))
        if (not key or not file.startswith(os.path.realpath(ROOT) + os.sep)
                or not os.path.isfile(file)):
            return self.error(404, "NoSuchKey", key)
        with open(file, "rb") as f:
            data = f.read()
        size = len(data)
        first, last, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            first = int(a)
            last = min(int(b), size - 1) if b else size - 1
            if first >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return self.note(416)
            status = 206
        part = data[first:last + 1]
        self.send_response(status)
        self.send_header("Content-Length", str(len(part)))
        self.send_header("ETag", '"%s"' % hashlib.md5(data).hexdigest())
        self.send_header("Last-Modified", email.utils.formatdate(
            os.path.getmtime(file), usegmt=True))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range",
                             "bytes %d-%d/%d" % (first, last, size))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(part)
        self.note(status)

    do_GET = serve
    do_HEAD = serve


if __name__ == "__main__":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(PORT)),
                                             Handler)
    server.daemon_threads = True
    server.serve_forever()
