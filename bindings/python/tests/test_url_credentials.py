"""A URL's user:password never reaches an exception's text: the library's
messages are redacted where they are made (issue 24, item 14)."""
import os
import tempfile

import pytest

import sluice


def open_failing(code):
    """The sluice.Error of opening a script holding `code` (in a short
    path, so that the message fits the error slot without elision)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        path = os.path.join(d, "p.lua")
        with open(path, "w") as f:
            f.write(code)
        with pytest.raises(sluice.Error) as e:
            sluice.open_script(path)
    return str(e.value) + e.value.detail


def test_url_credentials_are_redacted_in_errors(monkeypatch):
    monkeypatch.setenv("SLUICE_HTTP_RETRIES", "0")
    text = open_failing(
        'local sluice = require "sluice"\n'
        'return sluice.open("npy:http://alice:pw-py-1@127.0.0.1:1/x.npy")\n')
    assert "http://***@127.0.0.1:1/x.npy" in text
    assert "pw-py-1" not in text and "alice" not in text


def test_s3_endpoint_credentials_are_redacted(monkeypatch):
    monkeypatch.setenv("SLUICE_HTTP_RETRIES", "0")
    monkeypatch.setenv("SLUICE_S3_ENDPOINT", "http://ak:pw-py-2@127.0.0.1:1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SK")
    text = open_failing('local sluice = require "sluice"\n'
                        'return sluice.open("npy:s3://bkt/x.npy")\n')
    assert "s3://bkt/x.npy (http://***@127.0.0.1:1/bkt/x.npy)" in text
    assert "pw-py-2" not in text
