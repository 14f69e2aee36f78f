-- 38-url_credentials_spec.lua: a URL's user:password never reaches a Lua
-- error raised by sluice (issue 24, item 14): the library's messages are
-- redacted where they are made, and the Lua facade shows them as they are.
local sluice = require "sluice"

describe("URL credentials in errors", function()
  it("are redacted from an s3:// name that is not a bucket", function()
    local ok, err = pcall(sluice.open, "npy:s3://alice:pw-lua-1@bkt/x.npy")
    assert.is_false(ok)
    err = tostring(err)
    assert.truthy(err:find("s3://***@bkt/x.npy", 1, true), err)
    assert.truthy(err:find("is not an S3 bucket name", 1, true), err)
    assert.falsy(err:find("pw-lua-1", 1, true), err)
    assert.falsy(err:find("alice", 1, true), err)
  end)

  it("are redacted from an http:// URL libcurl cannot use", function()
    -- A space makes the URL malformed: an error at once, not retried.
    local ok, err = pcall(sluice.open, "npy:http://bob:pw-lua-2@bad host/x.npy")
    assert.is_false(ok)
    err = tostring(err)
    assert.truthy(err:find("http://***@bad host/x.npy", 1, true), err)
    assert.falsy(err:find("pw-lua-2", 1, true), err)
  end)
end)
