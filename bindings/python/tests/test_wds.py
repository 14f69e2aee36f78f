"""WebDataset pipelines from Python (issue 24 items 10 and 20): len() of a
wds pipeline is known from the local shards' headers, and a pipeline that
cannot know names the stage that cannot."""
import os

import pytest

import sluice
from conftest import SOURCE_DIR

SHARDS = os.path.join(SOURCE_DIR, "tests", "data", "formats",
                      "wds-{000000..000002}.tar")


def test_len_of_wds_shards_comes_from_their_headers():
    p = sluice.open_string(
        'return require("sluice").open(%r):batch(4, {lod = true})'
        % SHARDS)
    assert len(p) == 3
    assert sum(1 for _ in p) == 3
    q = sluice.open_string(
        'return require("sluice").open(%r, {threads = 2, fields = "cls"})'
        ':batch(5)' % SHARDS)
    assert len(q) == 3  # 12 samples: 5, 5, 2


def test_len_of_a_rank_is_its_share():
    p = sluice.open_string(
        'return require("sluice").open(%r, {shard = {rank = 4, world = 5}})'
        % SHARDS)
    assert len(p) == 3
    assert sum(1 for _ in p) == 3


def test_unknown_len_names_the_stage_that_cannot_know():
    p = sluice.open_string(
        'return require("sluice").open(%r):filter(function(s) return true end)'
        % SHARDS)
    with pytest.raises(TypeError, match="filter"):
        len(p)
