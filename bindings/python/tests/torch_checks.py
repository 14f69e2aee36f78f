"""The torch checks of test_torch.py, run by a Python that has torch (the
test's own, or another one: see test_torch.py).  Usage:

    python torch_checks.py T10K_SLR

Prints "torch checks passed: N" and exits 0, or raises."""
import os
import sys

import torch
from torch.utils.data import DataLoader

import sluice
from sluice.torch import IterableDataset

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "..", "examples", "fashion_mnist.lua")


def main(t10k):
    checks = 0
    # from_dlpack: zero-copy, right dtypes, valid after the pipeline closes.
    with sluice.open_script(SCRIPT, "test", t10k) as p:
        b = next(p)
        x = torch.from_dlpack(b["image"])
        y = torch.utils.dlpack.from_dlpack(b["label"])
        assert x.data_ptr() == b["image"].data_ptr
        assert x.dtype == torch.float32 and tuple(x.shape) == (1000, 784)
        assert y.dtype == torch.int64 and tuple(y.shape) == (1000,)
        want = x.clone()
    del b
    assert torch.equal(x, want)
    checks += 1

    # The DataLoader adapter: batch_size=None, one pass per epoch.
    ds = IterableDataset(SCRIPT, "test", t10k)
    loader = DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(2):
        n = 0
        for batch in loader:
            assert set(batch) == {"image", "label"}
            assert isinstance(batch["image"], torch.Tensor)
            n += batch["label"].shape[0]
        assert n == 10000, n
    assert len(ds) == 10
    checks += 1

    # Workers are refused with a clear message.
    try:
        for _ in DataLoader(ds, batch_size=None, num_workers=1):
            pass
    except RuntimeError as e:
        assert "num_workers=0" in str(e), e
    else:
        raise AssertionError("num_workers=1 was accepted")
    checks += 1

    # rank/world given by hand reach the script as the launcher's
    # RANK/WORLD_SIZE (a wds reader reading them: each rank half the
    # samples), and the environment is left as it was.
    import tempfile
    from wds_shards import write_wds_shards
    before = os.environ.get("RANK")
    with tempfile.TemporaryDirectory() as tmp:
        pattern = write_wds_shards(tmp, 4, 16)
        wds = os.path.join(tmp, "wds.lua")
        with open(wds, "w") as f:
            f.write('return require("sluice").open((...), {shard = "env"})'
                    ':batch(8)')
        seen = []
        for rank in (0, 1):
            ds2 = IterableDataset(wds, pattern, rank=rank, world=2)
            assert (ds2.rank, ds2.world) == (rank, 2)
            mine = []
            for b in DataLoader(ds2, batch_size=None, num_workers=0):
                # Ragged fields one entry per sample (sluice.columns).
                assert isinstance(b["__key__"], list)
                assert len(b["__key__"]) == 8 == len(b["txt"])
                assert all(isinstance(k, str) for k in b["__key__"])
                assert all(isinstance(t, bytes) for t in b["txt"])
                assert isinstance(b["cls"], torch.Tensor)
                assert tuple(b["cls"].shape) == (8,)
                mine += b["__key__"]
            ds2.close()
            assert len(mine) == 32, len(mine)
            seen += mine
        assert len(set(seen)) == 64
    assert os.environ.get("RANK") == before
    try:
        IterableDataset(SCRIPT, "test", t10k, rank=1)
    except ValueError as e:
        assert "go together" in str(e), e
    else:
        raise AssertionError("rank without world was accepted")
    ds.close()
    checks += 1

    # torch.distributed, when initialised, gives the rank and world size.
    import torch.distributed as dist
    if dist.is_available():
        store = tempfile.NamedTemporaryFile(delete=False)
        store.close()
        dist.init_process_group("gloo", init_method="file://" + store.name,
                                rank=0, world_size=1)
        try:
            ds3 = IterableDataset(SCRIPT, "test", t10k, rank=5, world=9)
            assert (ds3.rank, ds3.world) == (0, 1), (ds3.rank, ds3.world)
            assert sum(b["label"].shape[0] for b in ds3) == 10000
            ds3.close()
        finally:
            dist.destroy_process_group()
            if os.path.exists(store.name):  # gloo may remove it itself
                os.unlink(store.name)
    checks += 1
    print("torch checks passed: %d" % checks)


if __name__ == "__main__":
    main(sys.argv[1])
