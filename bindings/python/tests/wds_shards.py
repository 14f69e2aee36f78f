"""WebDataset shards for the tests (no pytest: torch_checks.py uses it
too)."""
import os


def write_wds_shards(folder, shards, per_shard):
    """WebDataset shards folder/shard-{0..shards-1}.tar, sample j of shard
    i keyed "s<i>_<j>" (keys of two lengths when j reaches 10) with a `cls`
    (i * 100 + j) and a `txt` member of a length that varies.  Returns the
    brace pattern naming them."""
    import io
    import tarfile
    for i in range(shards):
        with tarfile.open(os.path.join(folder, "shard-%d.tar" % i), "w",
                          format=tarfile.USTAR_FORMAT) as tar:
            for j in range(per_shard):
                for ext, data in (("cls", b"%d" % (i * 100 + j)),
                                  ("txt", b"t" * (j + 1))):
                    info = tarfile.TarInfo("s%d_%d.%s" % (i, j, ext))
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return os.path.join(folder, "shard-{0..%d}.tar" % (shards - 1))
