-- spec/14-images_spec.lua: images from Lua (docs/IMAGES.md) - sluice.open
-- on a folder of PNG/JPEG files, :decode_image{} on packed encoded images,
-- :random_crop_flip{}, and the errors.  The images are Fashion-MNIST t10k
-- images written here by the build's sluice_test_mkimages helper.
local sluice = require "sluice"
local H = dofile "spec/helper.lua"

local FMNIST = "/usr/share/datasets/fashion-mnist/"
local N = 60
local CLASSES = "Ankle_boot,Bag,Coat,Dress,Pullover,Sandal,Shirt,Sneaker,"
  .. "T-shirt_top,Trouser"

local function sh(cmd)
  assert(os.execute(cmd) == 0, cmd)
end

local function flat(t)
  local out = {}
  local function walk(x)
    if type(x) == "table" then
      for i = 1, #x do walk(x[i]) end
    else
      out[#out + 1] = x
    end
  end
  walk(t)
  return out
end

-- Every sample of p's pass as {image = flat pixels, label = n}.
local function read_all(p)
  local out = {}
  for s in p:iter() do
    out[#out + 1] = {image = flat(s.image:totable()), label = s.label,
                     shape = s.image.shape}
  end
  return out
end

describe("sluice images", function()
  local dir, build, want_labels, idx_images
  setup(function()
    dir = H.tmpdir()
    build = H.build_dir()
    local mk = build .. "/tools/sluice_test_mkimages"
    sh(("'%s' '%s/png' %d png > '%s/labels.txt'"):format(mk, dir, N, dir))
    sh(("'%s' '%s/jpeg' %d jpeg > /dev/null"):format(mk, dir, N))
    want_labels = {}
    for line in io.lines(dir .. "/labels.txt") do
      want_labels[#want_labels + 1] = tonumber(line)
    end
    -- The source pixels in the folders' order: by class name, then number.
    local src = sluice.open("idx:" .. FMNIST .. "t10k-images-idx3-ubyte.gz")
      :take(N)
    local rows = {}
    for s in src:iter() do
      rows[#rows + 1] = {image = flat(s.image:totable()), label = s.label}
    end
    local names = {"T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"}
    local sorted = {}
    for i, n in ipairs(names) do sorted[i] = n end
    table.sort(sorted)
    local rank = {}
    for r, n in ipairs(sorted) do rank[n] = r - 1 end
    idx_images = {}
    for r = 0, 9 do
      for _, row in ipairs(rows) do
        if rank[names[row.label + 1]] == r then
          idx_images[#idx_images + 1] = row.image
        end
      end
    end
  end)
  teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

  describe(".open() on an image folder", function()
    it("gives the PNG pixels exactly, with ImageFolder labels", function()
      local p = sluice.open("image:" .. dir .. "/png", {threads = 2})
      local sch = p:schema()
      assert.equal("u8", sch.image.dtype)
      assert.same({-1, -1, -1}, sch.image.shape)
      assert.equal(CLASSES, sch.metadata.classes)
      local got = read_all(p)
      assert.equal(N, #got)
      for i = 1, N do
        assert.same({28, 28, 1}, got[i].shape)
        assert.same(idx_images[i], got[i].image)
        assert.equal(want_labels[i], got[i].label)
      end
    end)

    it("takes channels, resize and a declared shape", function()
      local p = sluice.open("image:" .. dir .. "/png",
                            {channels = 3, resize = {14, 14, "nearest"}})
      assert.same({14, 14, 3}, p:schema().image.shape)
      local s = p:next()
      assert.same({14, 14, 3}, s.image.shape)
      -- nearest 28 -> 14 takes the odd rows and columns; gray as RGB
      -- repeats the value
      local px = flat(s.image:totable())
      for y = 0, 13 do
        for x = 0, 13 do
          local v = idx_images[1][(2 * y + 1) * 28 + 2 * x + 1 + 1]
          for c = 1, 3 do
            assert.equal(v, px[(y * 14 + x) * 3 + c])
          end
        end
      end
      p = sluice.open("image:" .. dir .. "/png", {shape = {32, 32}})
      local ok, err = pcall(p.next, p)
      assert.is_false(ok)
      assert.matches("the image is 28x28 %(height x width%), the declared "
                     .. "shape is 32x32", err)
    end)

    it("refuses to batch images of unknown size unless lod or pad is asked",
       function()
      -- u8[-1,-1,-1]: concatenating along the height (LoD) used to turn 4
      -- images of 28x28 into one of 112x28 without a word.
      local p = sluice.open("image:" .. dir .. "/png")
      local ok, err = pcall(p.batch, p, 4)
      assert.is_false(ok)
      assert.matches("batch: field 'image' is u8[-1,-1,-1]: a dimension "
                     .. "after the first varies", err, 1, true)
      assert.matches("lod = true", err, 1, true)
      -- Asked for: today's LoD merge, each image's rows marked.
      local b = sluice.open("image:" .. dir .. "/png"):batch(4, {lod = true})
        :next()
      assert.same({112, 28, 1}, b.image.shape)
      assert.same({0, 28, 56, 84, 112}, b.image.lod)
      -- Padding: [4, 28, 28, 1] and image_len.
      b = sluice.open("image:" .. dir .. "/png"):batch(4, {pad = true}):next()
      assert.same({4, 28, 28, 1}, b.image.shape)
      -- A fixed shape (declared size and channels) stacks without asking.
      b = sluice.open("image:" .. dir .. "/png",
                      {shape = {28, 28}, channels = 1}):batch(4):next()
      assert.same({4, 28, 28, 1}, b.image.shape)
      assert.equal("sluice: :batch(): option 'lod' must be a boolean (got "
                   .. "a number)", H.misuse(function()
                     sluice.range(3):batch(2, {lod = 1})
                   end))
    end)

    it("names the file and the decoder's message for a damaged image",
       function()
      local bad = dir .. "/bad"
      sh(("mkdir -p '%s/a' && cp '%s'/png/Bag/* '%s/a/'"):format(bad, dir, bad))
      local first = io.popen("ls '" .. dir .. "/jpeg/Bag' | head -1"):read("*l")
      local f = assert(io.open(dir .. "/jpeg/Bag/" .. first, "rb"))
      local bytes = f:read("*a")
      f:close()
      local out = assert(io.open(bad .. "/a/zz.jpg", "wb"))
      out:write(bytes:sub(1, math.floor(#bytes / 2)))
      out:close()
      local p = sluice.open("image:" .. bad, {threads = 2})
      local n = 0
      local ok, err = pcall(function()
        for _ in p:iter() do n = n + 1 end
      end)
      assert.is_false(ok)
      assert.matches("image: " .. bad:gsub("%p", "%%%0") .. "/a/zz%.jpg: "
                     .. "jpeg: Premature end of JPEG file", err)
      local nbag = tonumber(io.popen("ls '" .. bad .. "/a' | grep -c png")
                              :read("*l"))
      assert.equal(nbag, n) -- every good image first, in order
      -- skipped and counted
      p = sluice.open("image:" .. bad, {policy = "skip_chunk", max_bad = 1})
      assert.equal(nbag, #read_all(p))
      local st = p:stats()
      assert.equal(nbag, st[1].samples_out)
      assert.equal(nbag + 1, st[2].samples_out)
    end)

    it("rejects bad options where they are written", function()
      local path = "image:" .. dir .. "/png"
      assert.equal("sluice: sluice.open(): option 'channels' must be 1, 3 or "
                   .. "0 (as stored) (got 2)",
                   H.misuse(function() sluice.open(path, {channels = 2}) end))
      assert.equal("sluice: sluice.open(): resize filter must be "
                   .. "\"nearest\" or \"bilinear\" (got cubic)",
                   H.misuse(function()
                     sluice.open(path, {resize = {8, 8, "cubic"}})
                   end))
      assert.equal("sluice: sluice.open(): use either 'resize' or 'shape'",
                   H.misuse(function()
                     sluice.open(path, {resize = {8, 8}, shape = {8, 8}})
                   end))
    end)
  end)

  describe(":decode_image()", function()
    local slr
    setup(function()
      slr = dir .. "/jpeg.slr"
      -- --order sorted: record k is image k of the folder (compared below)
      sh(("'%s/tools/sluice' pack images -q --order sorted '%s/jpeg' -o '%s'")
         :format(build, dir, slr))
    end)

    it("decodes packed images identically with 1 and 2 threads", function()
      local one = read_all(sluice.open(slr):decode_image{threads = 1})
      local two = read_all(sluice.open(slr):decode_image{threads = 2,
                                                         window = 3})
      local folder = read_all(sluice.open("image:" .. dir .. "/jpeg"))
      assert.equal(N, #one)
      assert.same(one, two)
      assert.same(one, folder)
      for i = 1, N do
        assert.equal(want_labels[i], one[i].label)
        local sum = 0
        for k = 1, 784 do
          sum = sum + math.abs(one[i].image[k] - idx_images[i][k])
        end
        assert.is_true(sum / 784 <= 2.5)
      end
    end)

    it("feeds random_crop_flip, deterministic across threads", function()
      local function run(threads, seed)
        return read_all(sluice.open(slr)
          :decode_image{threads = threads, channels = 1}
          :random_crop_flip{size = {20, 24}, seed = seed})
      end
      local a, b = run(1, 5), run(2, 5)
      assert.same(a, b)
      assert.same({20, 24, 1}, a[1].shape)
      assert.are_not.same(a, run(2, 6))
    end)

    it("rejects misuse", function()
      local p = sluice.open(slr)
      assert.equal("sluice: :decode_image(): unknown option 'thread' (known: "
                   .. "channels, field, max_bad, ordered, policy, resize, "
                   .. "shape, threads, window)",
                   H.misuse(function() p:decode_image{thread = 2} end))
      assert.matches("decode_image: upstream has no field 'pixels'",
                     select(2, pcall(p.decode_image, p, {field = "pixels"})))
      p = sluice.range(3)
      assert.matches("random_crop_flip: upstream has no field 'image'",
                     select(2, pcall(p.random_crop_flip, p, {})))
    end)
  end)
end)
