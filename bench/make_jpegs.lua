-- make_jpegs.lua DIR [N] [SEED] - N (default 1000) JPEGs of mixed sizes in
-- DIR/a and DIR/b (two classes, for the image: reader), for the image
-- pipelines of bench/bench_autotune.lua and bench/budget_rss.lua (issue 27).
-- Each image is W x H RGB with W and H drawn from 160..480 (deterministic
-- from SEED), smooth gradients under 8 x 8 blocks of noise, so that a file
-- costs what a photo of its size costs to decode; written as PPM and
-- compressed by libjpeg-turbo's `cjpeg` (quality 90; Debian:
-- libjpeg-turbo-progs).  Existing files are kept (a second run is free).
--   luajit bench/make_jpegs.lua /tmp/sluice_jpegs 1000
local dir, n, seed = arg[1], tonumber(arg[2] or "1000"), tonumber(arg[3] or "7")
if not dir then
  io.stderr:write("usage: luajit bench/make_jpegs.lua DIR [N] [SEED]\n")
  os.exit(2)
end
assert(n and n >= 1, "N must be a number >= 1")
assert(os.execute("command -v cjpeg >/dev/null") == 0,
       "cjpeg not found: apt-get install libjpeg-turbo-progs")
os.execute(("mkdir -p '%s/a' '%s/b'"):format(dir, dir))

-- A small deterministic generator (xorshift32 on Lua numbers through bit).
local bit = require "bit"
local state = seed * 2654435761 % 4294967296
local function rand()
  state = bit.bxor(state, bit.lshift(state, 13))
  state = bit.bxor(state, bit.rshift(state, 17))
  state = bit.bxor(state, bit.lshift(state, 5))
  return (state % 4294967296) / 4294967296
end

local made = 0
local tmp = os.tmpname()
for i = 1, n do
  local w, h = 160 + math.floor(rand() * 321), 160 + math.floor(rand() * 321)
  local r0, g0, b0 = rand() * 255, rand() * 255, rand() * 255
  local name = ("%s/%s/%05d.jpg"):format(dir, i % 2 == 0 and "a" or "b", i)
  local f = io.open(name, "rb")
  if f then
    f:close()
  else
    local out = {("P6\n%d %d\n255\n"):format(w, h)}
    local noise = {}
    for k = 0, math.ceil(w / 8) * math.ceil(h / 8) do noise[k] = rand() * 60 end
    local bw = math.ceil(w / 8)
    for y = 0, h - 1 do
      local row = {}
      for x = 0, w - 1 do
        local nz = noise[math.floor(y / 8) * bw + math.floor(x / 8)]
        local r = (r0 + x * 0.5 + nz) % 256
        local g = (g0 + y * 0.5 + nz) % 256
        local b = (b0 + (x + y) * 0.25 - nz) % 256
        row[#row + 1] = string.char(math.floor(r), math.floor(g), math.floor(b))
      end
      out[#out + 1] = table.concat(row)
    end
    local p = assert(io.open(tmp, "wb"))
    p:write(table.concat(out))
    p:close()
    assert(os.execute(("cjpeg -quality 90 -outfile '%s' '%s'")
                      :format(name, tmp)) == 0, "cjpeg failed on " .. name)
    made = made + 1
  end
end
os.remove(tmp)
io.stderr:write(("make_jpegs: %d JPEGs in %s (%d new)\n"):format(n, dir, made))
