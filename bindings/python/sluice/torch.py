"""sluice.torch: a sluice pipeline as a torch.utils.data.IterableDataset.

    from sluice.torch import IterableDataset
    ds = IterableDataset("examples/fashion_mnist.lua", "train", "data")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    for batch in loader:          # one pass per epoch
        x, y = batch["image"], batch["label"]   # torch tensors, zero-copy

Importing this module imports torch; `import sluice` alone does not.  The
pipeline batches and runs its own threads, so the DataLoader must neither
batch (batch_size=None) nor start worker processes (num_workers=0).

Sharding: when torch.distributed is initialised, the rank and world size
come from it (otherwise from the rank=/world= arguments, else the
launcher's environment); they reach the script as
sluice.open_script(..., rank=, world=) gives them: as RANK and WORLD_SIZE,
which every sharded source reads.

Fields: sluice.columns - fixed-shape fields as torch tensors sharing the
batch's memory (DLPack), ragged ones as one entry per sample: a list of
bytes (of str for __key__), or of tensors (views, no copy).
"""
import os

import torch
import torch.utils.data

import sluice
from sluice.columns import columns


def _dist_rank_world():
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, None


class IterableDataset(torch.utils.data.IterableDataset):
    """A Lua pipeline script (sluice.open_script(script, *args)) yielding
    dicts of torch tensors that share the batches' memory (DLPack); ragged
    fields as lists, one entry per sample (sluice.columns)."""

    def __init__(self, script, *args, rank=None, world=None):
        super().__init__()
        self.script = os.fspath(script)
        self.args = tuple(str(a) for a in args)
        drank, dworld = _dist_rank_world()
        if drank is None:
            drank, dworld = sluice._check_rank_world(rank, world)
        self.rank, self.world = drank, dworld
        self._pipeline = None

    @property
    def pipeline(self):
        """The sluice.Pipeline (opened at first use)."""
        if self._pipeline is None or self._pipeline.closed:
            self._pipeline = sluice.open_script(
                self.script, *self.args, rank=self.rank, world=self.world)
        return self._pipeline

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None:
            raise RuntimeError(
                "sluice.torch.IterableDataset: use DataLoader(..., "
                "num_workers=0): the pipeline runs its own threads")
        from_dlpack = torch.utils.dlpack.from_dlpack
        for batch in self.pipeline:
            yield columns(batch, from_dlpack)

    def __len__(self):
        return len(self.pipeline)

    def state_dict(self):
        """The pipeline's position ({"sluice": bytes})."""
        return {"sluice": self.pipeline.state()}

    def load_state_dict(self, state):
        self.pipeline.restore(state["sluice"])

    def close(self):
        if self._pipeline is not None:
            self._pipeline.close()
