"""sluice.columns: a batch's fields as a DataLoader's collate gives them.

A batch of a sluice pipeline holds each field as one tensor.  Fixed-shape
fields stack along a new first dimension and stay one tensor.  A ragged
field (its rows of different lengths, concatenated along the first
dimension with LoD offsets, `Tensor.lod`) is one row per sample: a
`bytes` field becomes a list of `bytes` (a list of `str` for WebDataset's
`__key__` and `__url__`, as webdataset and `default_collate` give them), a
numeric one a list of arrays (views of the batch, no copy) - never one flat
tensor with the sample boundaries lost.  A `bytes` field without offsets
(one sample, no batch) is one `bytes` (or `str`).

This module needs neither numpy nor torch: `convert` turns a Tensor into
the array type wanted (`torch.from_dlpack`, `numpy.from_dlpack`) and rows
are that array's slices.  sluice.torch uses it; docs/PYTHON.md.
"""

# The WebDataset fields that are text (the sample's key, its shard's name).
TEXT_FIELDS = frozenset(["__key__", "__url__"])


def offsets(tensor):
    """The LoD offsets of a ragged field as a list of ints (n + 1 entries),
    or None for a field that is not ragged."""
    lod = tensor.lod
    if lod is None:
        return None
    return memoryview(lod).cast("B").cast("q").tolist()


def field(name, tensor, convert):
    """One field of a batch as collate gives it (see the module)."""
    lod = offsets(tensor)
    if tensor.dtype == "bytes":
        raw = memoryview(tensor).cast("B").tobytes()
        if lod is None:
            rows = raw
        else:
            rows = [raw[lod[i]:lod[i + 1]] for i in range(len(lod) - 1)]
        if name not in TEXT_FIELDS:
            return rows
        if lod is None:
            return rows.decode("utf-8", "surrogateescape")
        return [r.decode("utf-8", "surrogateescape") for r in rows]
    arr = convert(tensor)
    if lod is None:
        return arr
    return [arr[lod[i]:lod[i + 1]] for i in range(len(lod) - 1)]


def columns(batch, convert):
    """{name: field(name, tensor, convert)} of a sluice.Batch, in the
    schema's order."""
    return {name: field(name, t, convert) for name, t in batch.items()}
