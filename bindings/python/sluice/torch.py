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
come from it (otherwise from the rank=/world= arguments, else none); they
are put into the environment as RANK and WORLD_SIZE before the script
runs, where sluice.shard_env() (and so a script's
`open_files{..., shard = {rank =, world =}}`) reads them.
"""
import os

import torch
import torch.utils.data

import sluice


def _dist_rank_world():
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, None


class IterableDataset(torch.utils.data.IterableDataset):
    """A Lua pipeline script (sluice.open_script(script, *args)) yielding
    dicts of torch tensors that share the batches' memory (DLPack)."""

    def __init__(self, script, *args, rank=None, world=None):
        super().__init__()
        self.script = os.fspath(script)
        self.args = tuple(str(a) for a in args)
        drank, dworld = _dist_rank_world()
        self.rank = drank if drank is not None else rank
        self.world = dworld if dworld is not None else world
        self._pipeline = None

    @property
    def pipeline(self):
        """The sluice.Pipeline (opened at first use)."""
        if self._pipeline is None or self._pipeline.closed:
            if self.rank is not None and self.world is not None:
                os.environ["RANK"] = str(self.rank)
                os.environ["WORLD_SIZE"] = str(self.world)
            self._pipeline = sluice.open_script(self.script, *self.args)
        return self._pipeline

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is not None:
            raise RuntimeError(
                "sluice.torch.IterableDataset: use DataLoader(..., "
                "num_workers=0): the pipeline runs its own threads")
        from_dlpack = torch.utils.dlpack.from_dlpack
        for batch in self.pipeline:
            yield {k: from_dlpack(v) for k, v in batch.items()}

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
