-- sluice.rng: the counter-based random numbers of Lua decorators
-- (docs/LUA.md, "Randomness"): ctx.rng in a map, filter or parser, and
-- sluice.rng(seed, epoch, index) to draw the same numbers elsewhere.
--
-- The draws of sample `index` (0-based, in the order the stage receives
-- its samples) of epoch `epoch` under seed `seed` come from a xoshiro256**
-- generator whose state is four outputs of a splitmix64 generator started
-- at
--   key = mix(mix(seed) ~ mix(epoch + G) ~ mix(index + 2G))
-- (mix = the splitmix64 finalizer, G = 0x9E3779B97F4A7C15, ~ = xor, all
-- modulo 2^64): exactly random_crop_flip's scheme (src/image/augment.c,
-- core/rng.h), so the same (seed, epoch, index) gives the same stream in C
-- and in Lua.  A draw depends on nothing but the key and the draws before
-- it for the same sample: not on threads, timing or other samples.
--
--   rng:random()      a float in [0, 1): the top 53 bits of an output / 2^53
--   rng:random(n)     an integer in [1, n]     (as math.random)
--   rng:random(m, n)  an integer in [m, n]     (n - m < 2^53)
--                     Lemire's unbiased bounded draw on the 64-bit output
--                     (core/rng.h's sl__rng_bounded): m + bounded(n - m + 1)
--   rng:normal([mean [, sd]])
--                     Box-Muller on two floats u1, u2:
--                     sqrt(-2 ln(1 - u1)) cos(2 pi u2) (one normal per two
--                     outputs; nothing is cached between calls)
--
-- The state is seeded on the first draw, so a decorator that takes ctx but
-- draws nothing for a sample pays two table stores.  The arithmetic is
-- LuaJIT's 64-bit integer cdata and bit operations, which the compiler
-- keeps in registers (no allocation in compiled code).
--
-- No bit.band here, on purpose: LuaJIT 2.1 before its fix of issue #1079
-- (2023; Debian 12 ships 2.1.0-beta3+git20220320) constant-folds a
-- right shift or rotate of a 64-bit and-with-constant, (x & k) >> s, as
-- (x >> s) & k', computing k' with 32-bit arithmetic: k' = (int32_t)
-- ((uint32_t)k >> s), sign-extended.  mul128 once took its halves with
-- band(x, 0xFFFFFFFF); in a trace where the bound of rng:random(0, 3) was
-- a constant, a0 * 4 became (a << 2) & 0x3FFFFFFFC and its >> 32 became
-- (a << 2 >> 32) & -4 instead of & 3, so the high word, the draw, came
-- out wrong (4 from random(0, 3)).  The low half of x is taken as
-- rshift(lshift(x, 32), 32), which no fold rule turns into an and; the
-- remaining operations (shifts, rotates, xor, add, multiply) fold
-- correctly.  spec/31-rng_jit_spec.lua draws under the JIT in the
-- patterns that triggered it and compares with core/rng.h's values.
local ffi = require "ffi"
local bit = require "bit"

local bxor = bit.bxor
local lshift, rshift, rol = bit.lshift, bit.rshift, bit.rol
local floor, sqrt, log, cos, pi = math.floor, math.sqrt, math.log, math.cos,
  math.pi
local type, error, tonumber, tostring, setmetatable = type, error, tonumber,
  tostring, setmetatable

local M = {}

local U64 = ffi.typeof("uint64_t")
local STATE = ffi.typeof("uint64_t[4]")
local GOLDEN = 0x9E3779B97F4A7C15ULL
local GOLDEN2 = GOLDEN * 2ULL
local ZERO = 0ULL

local function mix(z)
  z = bxor(z, rshift(z, 30)) * 0xBF58476D1CE4E5B9ULL
  z = bxor(z, rshift(z, 27)) * 0x94D049BB133111EBULL
  return bxor(z, rshift(z, 31))
end
M.mix = mix

-- The next output of the xoshiro256** generator with state st.
local function next64(st)
  local s0, s1, s2, s3 = st[0], st[1], st[2], st[3]
  local result = rol(s1 * 5ULL, 7) * 9ULL
  local t = lshift(s1, 17)
  s2 = bxor(s2, s0)
  s3 = bxor(s3, s1)
  s1 = bxor(s1, s2)
  s0 = bxor(s0, s3)
  s2 = bxor(s2, t)
  s3 = rol(s3, 45)
  st[0], st[1], st[2], st[3] = s0, s1, s2, s3
  return result
end

-- The low 32 bits of x (a uint64_t), without an and-mask: see the top of
-- this file for the miscompiled fold that a mask reaches.
local function low32(x)
  return rshift(lshift(x, 32), 32)
end

-- The high and low 64 bits of a * b (core/rng.h's sl__mul128 without
-- __int128): the high word from the four 32x32-bit partial products, the
-- low word as the wrapping 64-bit product.
local function mul128(a, b)
  local a0, a1 = low32(a), rshift(a, 32)
  local b0, b1 = low32(b), rshift(b, 32)
  local p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
  local mid = rshift(p00, 32) + low32(p01) + low32(p10)
  return p11 + rshift(p01, 32) + rshift(p10, 32) + rshift(mid, 32), a * b
end

-- A uniform integer in [0, n) (n: uint64 >= 1), as sl__rng_bounded.
local function bounded(st, n)
  local hi, lo = mul128(next64(st), n)
  if lo < n then
    local threshold = (ZERO - n) % n
    while lo < threshold do hi, lo = mul128(next64(st), n) end
  end
  return hi
end

local Rng = {}
Rng.__index = Rng
M.Rng = Rng

-- Seeds r's state from its key (seed mix, epoch, index).
local function seed_state(r)
  local e = r._epoch
  if e ~= r._emix_of then
    r._emix, r._emix_of = mix(e + GOLDEN), e
  end
  local key = mix(bxor(r._smix, r._emix, mix(r._index + GOLDEN2)))
  local st = r._st
  for i = 0, 3 do
    key = key + GOLDEN
    st[i] = mix(key)
  end
  r._ready = true
  return st
end

local function bad_bound(what, v)
  error(("rng:random(): %s must be an integer (got %s)")
        :format(what, tostring(v)), 3)
end

function Rng:random(m, n)
  local st = self._ready and self._st or seed_state(self)
  if m == nil then
    return tonumber(rshift(next64(st), 11)) * 2^-53
  end
  if n == nil then m, n = 1, m end
  if type(m) ~= "number" or m ~= floor(m) then bad_bound("m", m) end
  if type(n) ~= "number" or n ~= floor(n) then bad_bound("n", n) end
  if m > n then error("rng:random(): interval is empty", 2) end
  if n - m >= 2^53 then
    error("rng:random(): interval is too large (more than 2^53 values)", 2)
  end
  return m + tonumber(bounded(st, n - m + 1 + ZERO))
end

function Rng:normal(mean, sd)
  local st = self._ready and self._st or seed_state(self)
  local u1 = tonumber(rshift(next64(st), 11)) * 2^-53
  local u2 = tonumber(rshift(next64(st), 11)) * 2^-53
  local z = sqrt(-2 * log(1 - u1)) * cos(2 * pi * u2)
  if mean == nil then return z end
  return mean + (sd or 1) * z
end

-- The raw 64-bit output (a uint64_t cdata), for tests and bit-exact use.
function Rng:bits()
  local st = self._ready and self._st or seed_state(self)
  return next64(st)
end

-- Moves r to (epoch, index): the stream starts afresh at the next draw.
function Rng:_at(epoch, index)
  self._epoch, self._index, self._ready = epoch, index, false
end

-- A seed (a number in [0, 2^64) or a uint64_t cdata) as a uint64_t.
local function seed_u64(seed)
  if type(seed) == "cdata" then return U64(seed) end
  if type(seed) ~= "number" or seed ~= floor(seed) or seed < 0 or
     seed >= 2^64 then
    return nil
  end
  if seed < 2^53 then return U64(seed) end
  local hi = floor(seed / 2^32)
  return lshift(U64(hi), 32) + (seed - hi * 2^32)
end
M.seed_u64 = seed_u64

-- A generator for (seed, epoch, index).
function M.new(seed, epoch, index)
  local s = seed_u64(seed or 0)
  if not s then
    error(("sluice.rng(): seed must be an integer in [0, 2^64) (got %s)")
          :format(tostring(seed)), 2)
  end
  epoch, index = epoch or 0, index or 0
  for _, v in ipairs({epoch, index}) do
    if type(v) ~= "number" or v ~= floor(v) or v < 0 or v >= 2^53 then
      error(("sluice.rng(): epoch and index must be integers in [0, 2^53) "
             .. "(got %s)"):format(tostring(v)), 2)
    end
  end
  return setmetatable({_st = STATE(), _smix = mix(s), _seed = s,
                       _epoch = epoch, _index = index, _ready = false,
                       _emix = ZERO, _emix_of = -1}, Rng)
end

return M
