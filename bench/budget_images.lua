-- budget_images.lua SLR [MEMORY] - an image pipeline under the memory budget
-- (issue 27 item 1; docs/PERFORMANCE.md "A memory budget"): the JPEGs of
-- mixed sizes packed in SLR (`sluice pack images FOLDER -o SLR`) ->
-- decode_image (2 threads, RGB) -> random_crop_flip 64x64 -> shuffle(5000)
-- -> batch(32) -> prefetch(8).  MEMORY: a size ("64MiB") set on the
-- source; "none": no budget at all (not even the default); "default" or
-- nothing: the default budget.
--   /usr/bin/time -v build/tools/sluice run bench/budget_images.lua x.slr 64MiB
local sluice = require "sluice"
local path, memory = ...
local src = sluice.open("slr:" .. path)
if memory == "none" then
  src:budget(false)
elseif memory and memory ~= "" and memory ~= "default" then
  src:budget(memory)
end
return src:decode_image{threads = 2, channels = 3}
  :random_crop_flip{size = {64, 64}, seed = 7}
  :shuffle(5000, {seed = 1})
  :batch(32)
  :prefetch(8)
