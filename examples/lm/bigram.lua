-- bigram.lua SPLIT PATTERN [T] [B] [SEED] - the input pipeline of the
-- bigram trainer (examples/lm/bigram.c; `sluice run` runs it too).
--
--   SPLIT    train or val
--   PATTERN  token shards, e.g. "data/lm_*.bin" (sluice pack tokens)
--   T        tokens per window (default 64)
--   B        windows per batch (default 16)
--   SEED     shuffle seed (default 1)
--
--   train: tokens{seq_len = T, shuffle, block = B} -> batch(B) -> prefetch(4)
--   val:   tokens{seq_len = T, rank 0 of 1} -> batch(B)
--
-- Rank and world come from the launcher's environment (mpirun's
-- OMPI_COMM_WORLD_*, torchrun's RANK/WORLD_SIZE): with block = B, rank r
-- reads the batches llm.c's DataLoader(B, T, r, W) would.  Batches are
-- {inputs: i32[B, T], targets: i32[B, T]}.
local sluice = require "sluice"

local split, pattern, T, B, seed = ...
local USAGE = "usage: bigram.lua train|val PATTERN [T] [B] [SEED]"
if split ~= "train" and split ~= "val" then
  error(USAGE .. " (split: got " .. tostring(split) .. ")", 0)
end
if not pattern or pattern == "" then error(USAGE .. " (no PATTERN)", 0) end
T = tonumber(T) or 64
B = tonumber(B) or 16
seed = tonumber(seed) or 1

if split == "val" then
  return sluice.open("tokens:" .. pattern, {seq_len = T, rank = 0, world = 1})
    :batch(B)
end
return sluice.open("tokens:" .. pattern, {seq_len = T, shuffle = true,
                                          seed = seed, block = B})
  :batch(B, {drop_last = true})
  :prefetch(4)
