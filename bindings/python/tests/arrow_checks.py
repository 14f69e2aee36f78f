"""The Arrow checks (test_arrow.py runs them with an interpreter that has
pyarrow): sluice.from_arrow against pyarrow's own reads of Parquet files
pyarrow wrote, a Hugging Face-style shard set through pyarrow.dataset, a
Lua pipeline script over an Arrow stream, nulls, and batches out through
__arrow_c_array__ (zero-copy) and back (round trip)."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

import sluice


def row_value(t, arrow_type):
    """A sluice Tensor as the Python value pyarrow's to_pylist gives."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return bytes(memoryview(t)).decode()
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return bytes(memoryview(t))
    a = np.asarray(t)
    if pa.types.is_boolean(arrow_type):
        return bool(a)
    if (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) \
            and (pa.types.is_list(arrow_type.value_type)
                 or pa.types.is_large_list(arrow_type.value_type)):
        lod = np.asarray(t.lod)
        return [a[lod[i]:lod[i + 1]].tolist() for i in range(len(lod) - 1)]
    return a.tolist()


def make_table(n=37):
    rng = np.random.default_rng(7)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "score": pa.array(rng.standard_normal(n).astype(np.float32)),
        "flag": pa.array([i % 3 == 0 for i in range(n)]),
        "small": pa.array(np.arange(n, dtype=np.uint8)),
        "emb": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(n * 4).astype(np.float32)), 4),
        "grid": pa.FixedSizeListArray.from_arrays(
            pa.FixedSizeListArray.from_arrays(
                pa.array(np.arange(n * 6, dtype=np.int16)), 3), 2),
        "text": pa.array(["row %d %s" % (i, "x" * (i % 5)) for i in range(n)]),
        "blob": pa.array([bytes(range(i % 7)) for i in range(n)],
                         type=pa.binary()),
        "tokens": pa.array([list(range(i % 6)) for i in range(n)],
                           type=pa.list_(pa.int32())),
        "spans": pa.array([[list(range(j)) for j in range(i % 4)]
                           for i in range(n)],
                          type=pa.list_(pa.list_(pa.int64()))),
    })


def check_rows(pipeline, table):
    want = table.to_pylist()
    types = {f.name: f.type for f in table.schema}
    got = 0
    for i, row in enumerate(pipeline):
        for name, t in row.items():
            assert row_value(t, types[name]) == pytest.approx(want[i][name]) \
                if isinstance(want[i][name], float) else \
                row_value(t, types[name]) == want[i][name], (i, name)
        got += 1
    assert got == len(want)


def test_parquet_written_by_pyarrow_equals_pyarrows_read(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(make_table(), path, row_group_size=10)
    table = pq.read_table(path)
    p = sluice.from_arrow(table)
    sch = p.schema
    assert sch["id"] == ("i64", ())
    assert sch["emb"] == ("f32", (4,))
    assert sch["grid"] == ("i16", (2, 3))
    assert sch["text"] == ("bytes", (-1,))
    assert sch["blob"] == ("u8", (-1,))
    assert sch["tokens"] == ("i32", (-1,))
    assert sch["spans"] == ("i64", (-1,))
    check_rows(p, table)
    # The same file as a stream of record batches (several batches, each
    # with its own buffers).
    reader = pa.RecordBatchReader.from_batches(
        table.schema, pq.ParquetFile(path).iter_batches(batch_size=8))
    check_rows(sluice.from_arrow(reader), table)


def test_rows_are_views_of_the_arrow_buffers():
    table = make_table(8)
    emb = table.column("emb").chunk(0)
    base = emb.values.buffers()[1].address
    size = emb.values.buffers()[1].size
    for row in sluice.from_arrow(table):
        ptr = row["emb"].data_ptr
        assert base <= ptr < base + size


def test_batches_out_through_arrow_c_array_zero_copy_and_round_trip():
    table = make_table(37).select(["id", "score", "flag", "emb", "grid",
                                   "text", "tokens"])
    p = sluice.from_arrow(table, batch=10)
    out = []
    for b in p:
        rb = pa.record_batch(b)
        assert rb.num_rows == len(np.asarray(b["id"]))
        # no copy: the exported leaf is the batch's tensor
        leaf = rb.column("emb").values
        assert leaf.buffers()[1].address == b["emb"].data_ptr
        out.append(rb)
    assert [rb.num_rows for rb in out] == [10, 10, 10, 7]
    back = pa.Table.from_batches(out)
    assert back.column("grid").type == pa.list_(pa.list_(pa.int16(), 3), 2)
    assert back.column("text").type == pa.large_string()
    assert back.column("tokens").type == pa.large_list(pa.int32())
    for name in table.column_names:
        assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    # and back into sluice: the same rows again
    check_rows(sluice.from_arrow(back), back)


def test_round_trip_of_a_sluice_pipeline(t10k):
    code = """
      local path = select(2, ...)
      local sluice = require "sluice"
      return sluice.open(path):batch(250)
    """
    first = sluice.open_string(code, "unused", t10k)
    batches = [pa.record_batch(b) for b in first]
    table = pa.Table.from_batches(batches)
    assert table.num_rows == 10000
    assert table.schema.field("image").type == \
        pa.list_(pa.list_(pa.uint8(), 28), 28)
    again = sluice.open_string(code, "unused", t10k)
    back = sluice.from_arrow(table, batch=250)
    n = 0
    for a, b in zip(again, back):
        for name in ("image", "label"):
            assert np.array_equal(np.asarray(a[name]), np.asarray(b[name]))
        n += 1
    assert n == 40


def test_hugging_face_style_shard_set_through_pyarrow_dataset(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    rows = 0
    for i in range(3):
        n = 50 + 7 * i
        t = pa.table({
            "text": ["shard %d doc %d" % (i, k) for k in range(n)],
            "label": pa.array([(i * 100 + k) % 5 for k in range(n)],
                              type=pa.int64()),
            "input_ids": pa.array([[i, k, k + 1][: 1 + k % 3]
                                   for k in range(n)],
                                  type=pa.list_(pa.int32())),
        })
        pq.write_table(t, str(root / ("train-%05d-of-00003.parquet" % i)))
        rows += n
    ds = pads.dataset(str(root), format="parquet")
    want = ds.to_table()
    check_rows(sluice.from_arrow(ds), want)  # a Dataset: through its scanner
    # A Lua pipeline over the shard set: a Lua filter and a batch.
    code = """
      local src = ...
      local sluice = require "sluice"
      return sluice.open(src)
        :filter(function(s) return s.label % 2 == 0 end)
        :batch(16)
    """
    p = sluice.from_arrow(ds.scanner(), code=code)  # a Scanner too
    labels = np.concatenate([np.asarray(b["label"]) for b in p])
    want_labels = np.array([v for v in want.column("label").to_pylist()
                            if v % 2 == 0])
    assert np.array_equal(labels, want_labels)


def test_a_script_that_leaves_the_stream_unopened_releases_it():
    table = make_table(4)
    p = sluice.from_arrow(table, code="return require('sluice').range(3)")
    assert sum(1 for _ in p) == 3


def test_nulls_are_an_error_naming_column_and_row():
    t = pa.table({"a": pa.array([1.0, 2.0, None, 4.0], type=pa.float32())})
    p = sluice.from_arrow(t)
    it = iter(p)
    next(it)
    next(it)
    with pytest.raises(sluice.EINVAL, match=r"column 'a', row 2"):
        next(it)


def test_unmappable_columns_are_refused_at_open():
    t = pa.table({"ok": [1, 2],
                  "when": pa.array([0, 1], type=pa.timestamp("us"))})
    with pytest.raises(sluice.EUNSUPPORTED, match=r"column 'when'.*'tsu:'"):
        sluice.from_arrow(t)
    with pytest.raises(TypeError, match="__arrow_c_stream__"):
        sluice.from_arrow([1, 2, 3])


def test_a_consumed_stream_is_refused():
    reader = pa.RecordBatchReader.from_batches(
        make_table(3).schema, make_table(3).to_batches())
    cap = reader.__arrow_c_stream__()
    sluice.from_arrow(cap).close()
    with pytest.raises(ValueError, match="consumed"):
        sluice.from_arrow(cap)
