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

    # rank/world given by hand reach the environment (sluice.shard_env).
    ds2 = IterableDataset(SCRIPT, "test", t10k, rank=1, world=2)
    assert (ds2.rank, ds2.world) == (1, 2)
    next(iter(ds2))
    assert os.environ["RANK"] == "1" and os.environ["WORLD_SIZE"] == "2"
    ds2.close()
    ds.close()
    checks += 1

    # torch.distributed, when initialised, gives the rank and world size.
    import tempfile
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
            assert os.environ["RANK"] == "0"
            assert os.environ["WORLD_SIZE"] == "1"
            ds3.close()
        finally:
            dist.destroy_process_group()
            if os.path.exists(store.name):  # gloo may remove it itself
                os.unlink(store.name)
    checks += 1
    print("torch checks passed: %d" % checks)


if __name__ == "__main__":
    main(sys.argv[1])
