-- 12-device_spec.lua: :double_buffer{} on the host engine, its errors, the
-- device queries of batch fields (sluice.device, sluice.dlpack), and the
-- CUDA engine: its no-driver error here, its specs pending without a GPU.
local ffi = require "ffi"
local sluice = require "sluice"

local H = dofile "spec/helper.lua"
local misuse = H.misuse

-- Whether a CUDA device can be used here, and if not why (C's message).
local cuda_ok, cuda_why = pcall(function()
  local p = sluice.range(1):double_buffer{device = "cuda:0"}
  p:close()
end)

-- A spec that needs a CUDA device: pending (with the reason), never
-- silently skipped, on a machine without one.
local function gpu_it(name, fn)
  if cuda_ok then
    it(name, fn)
  else
    pending(name .. " - needs a CUDA device")
  end
end

-- The values of field `i` of every batch of p's pass, releasing each
-- batch as soon as it is read.
local function drain(p)
  local out = {}
  for b in p:iter() do
    for _, v in ipairs(b.i:totable()) do out[#out + 1] = v end
    sluice.release(b)
  end
  return out
end

local function iota(n)
  local t = {}
  for k = 1, n do t[k] = k - 1 end
  return t
end

describe("sluice.Pipeline", function()
  describe(":double_buffer()", function()
    it("yields the batches in order on the host engine, across resets", function()
      local p = sluice.range(95):batch(10):double_buffer{device = "cpu"}
      assert.same(iota(95), drain(p))
      p:reset()
      p:next()
      p:reset()
      assert.same(iota(95), drain(p))
    end)

    it("reports the device and a pointer per field", function()
      local p = sluice.range(8):batch(4):double_buffer{device = "cpu", slots = 3}
      local b = p:next()
      local where, ptr = sluice.device(b, "i")
      assert.equal("cpu", where)
      assert.equal("cdata", type(ptr))
      assert.equal(0, tonumber(ffi.cast("uintptr_t", ptr)) % 256)
      assert.equal(2, ffi.cast("int64_t *", ptr)[2])
      sluice.release(b)
    end)

    it("frees the slots of batches the loop dropped (no explicit release)", function()
      local p = sluice.range(50):batch(2):double_buffer{device = "cpu", slots = 2}
      local n = 0
      for b in p:iter() do
        n = n + 1
        assert.equal(2 * (n - 1), b.i[0])
      end
      assert.equal(25, n)
    end)

    it("raises when the consumer keeps every slot", function()
      local p = sluice.range(10):double_buffer{device = "cpu", slots = 2}
      local a, b = p:next(), p:next()
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.equal("double_buffer: the consumer holds all 2 slots (cpu): each "
                   .. "batch not yet released, and each DLPack export or "
                   .. "tensor taken from one, keeps its slot; release a batch "
                   .. "before asking for the next, or give the double buffer "
                   .. "more slots", err)
      assert.equal(0, a.i)
      assert.equal(1, b.i)
      sluice.release(a)
      sluice.release(b)
      p:reset()
      assert.equal(0, p:next().i)
    end)

    it("waits release_wait_ms for a release before raising", function()
      local p = sluice.range(3):double_buffer{device = "cpu", slots = 1,
                                               release_wait_ms = 10}
      local a = p:next()
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.truthy(err:find("holds all 1 slot (cpu) (for 10 ms)", 1, true))
      sluice.release(a)
    end)

    it("delivers upstream errors at their position", function()
      local p = sluice.zip(sluice.range(3), sluice.from_table {{x = 0}})
        :double_buffer{device = "cpu"}
      local s = p:next()
      assert.equal(0, s.i)
      sluice.release(s)
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.equal("zip: reader 1 ended after 1 samples while reader 0 has more",
                   err)
    end)

    it("rejects bad options before taking the upstream", function()
      local up = sluice.range(3)
      assert.equal("sluice: :double_buffer(): option 'device' must be \"cpu\", "
                   .. "\"cuda\", \"cuda:N\" or \"auto\" (got \"tpu:0\")",
                   misuse(function() up:double_buffer{device = "tpu:0"} end))
      assert.equal("sluice: :double_buffer(): option 'device' must be \"cpu\", "
                   .. "\"cuda\", \"cuda:N\" or \"auto\" (got \"cuda:x\")",
                   misuse(function() up:double_buffer{device = "cuda:x"} end))
      assert.equal("sluice: :double_buffer(): option 'device' must be \"cpu\", "
                   .. "\"cuda\", \"cuda:N\" or \"auto\" (got 0)",
                   misuse(function() up:double_buffer{device = 0} end))
      assert.equal("sluice: :double_buffer(): option 'slots' must be an "
                   .. "integer >= 1 (got 0)",
                   misuse(function() up:double_buffer{slots = 0} end))
      assert.equal("sluice: :double_buffer(): option 'slots' must be at most "
                   .. "256 (got 300)",
                   misuse(function() up:double_buffer{slots = 300} end))
      assert.equal("sluice: :double_buffer(): unknown option 'slot' (known: "
                   .. "device, release_wait_ms, slots, stream)",
                   misuse(function() up:double_buffer{slot = 2} end))
      assert.equal("sluice: :double_buffer(): option 'stream' must be a "
                   .. "cudaStream_t (a cdata pointer; got a number)",
                   misuse(function() up:double_buffer{stream = 1} end))
      assert.same({0, 1, 2}, H.collect(up)) -- still usable
    end)

    it("uses the host engine for \"auto\" without a CUDA device", function()
      if cuda_ok then
        pending("this machine has a CUDA device: \"auto\" takes it")
        return
      end
      local p = sluice.range(4):batch(2):double_buffer{}
      local b = p:next()
      assert.equal("cpu", (sluice.device(b, "i")))
      sluice.release(b)
    end)

    it("raises a clear CUDA error for \"cuda:0\" without a device", function()
      if cuda_ok then
        pending("this machine has a CUDA device")
        return
      end
      local up = sluice.range(3)
      local ok, err = pcall(up.double_buffer, up, {device = "cuda:0"})
      assert.is_false(ok)
      -- The CUDA error's name, or the runtime library that cannot load, or
      -- a libsluice built without the CUDA engine.
      assert.truthy(err:find("^double_buffer: cuda:0: "))
      assert.truthy(err:find("cudaError", 1, true)
                    or err:find("cannot load the CUDA runtime", 1, true)
                    or err:find("built without the CUDA engine", 1, true))
      assert.truthy(cuda_why:find(err, 1, true))
      -- No driver (this project's build machine) or no device: said
      -- plainly before the CUDA error.
      if err:find("cudaErrorInsufficientDriver", 1, true)
         or err:find("cudaErrorNoDevice", 1, true) then
        assert.truthy(err:find("^double_buffer: cuda:0: no CUDA device or "
                               .. "driver found %(cudaGetDeviceCount"))
      end
    end)

    gpu_it("puts batches on the GPU (device pointers, not host memory)", function()
      local p = sluice.range(64):batch(16):double_buffer{device = "cuda:0"}
      local n = 0
      for b in p:iter() do
        local where, ptr = sluice.device(b, "i")
        assert.equal("cuda:0", where)
        assert.is_not_nil(ptr)
        n = n + 1
        sluice.release(b)
      end
      assert.equal(4, n)
    end)

    gpu_it("exports a GPU batch field as a kDLCUDA DLPack tensor", function()
      local p = sluice.range(8):batch(8):double_buffer{device = "cuda:0"}
      local b = p:next()
      local m = sluice.dlpack(b, "i")
      assert.equal(2, m.dl_tensor.device.device_type) -- kDLCUDA
      assert.equal(0, m.dl_tensor.device.device_id)
      sluice.release(b)
    end)

    gpu_it("\"auto\" takes the GPU when there is one", function()
      local p = sluice.range(4):batch(2):double_buffer{device = "auto"}
      local b = p:next()
      assert.equal("cuda:0", (sluice.device(b, "i")))
      sluice.release(b)
    end)
  end)
end)

describe("sluice", function()
  describe(".device()", function()
    it("raises for a released sample or an unknown field", function()
      local s = sluice.sample {x = 1}
      assert.equal("cpu", (sluice.device(s, "x")))
      local ok, err = pcall(sluice.device, s, "nope")
      assert.is_false(ok)
      assert.truthy(err:find("nope", 1, true))
      sluice.release(s)
      assert.equal("sluice: sluice.device(): the sample was released",
                   misuse(function() sluice.device(s, "x") end))
      assert.equal("sluice: sluice.device(): expected a sample (got a number)",
                   misuse(function() sluice.device(1, "x") end))
    end)
  end)

  describe(".dlpack()", function()
    it("exports a host field zero-copy, holding the sample until deleted", function()
      local s = sluice.sample({v = sluice.tensor("f32", {2, 3})})
      local m = sluice.dlpack(s, "v")
      local t = m.dl_tensor
      assert.equal(1, t.device.device_type) -- kDLCPU
      assert.equal(2, t.ndim)
      assert.equal(2, tonumber(t.shape[0]))
      assert.equal(3, tonumber(t.shape[1]))
      assert.equal(3, tonumber(t.strides[0]))
      assert.equal(1, tonumber(t.strides[1]))
      assert.equal(2, t.dtype.code) -- kDLFloat
      assert.equal(32, t.dtype.bits)
      assert.equal(0, tonumber(t.byte_offset))
      local _, ptr = sluice.device(s, "v")
      assert.equal(tonumber(ffi.cast("uintptr_t", ptr)),
                   tonumber(ffi.cast("uintptr_t", t.data)))
      -- The deleter runs once: by hand here (detaching the finalizer).
      ffi.gc(m, nil)
      m.deleter(m)
      sluice.release(s)
    end)
  end)
end)
