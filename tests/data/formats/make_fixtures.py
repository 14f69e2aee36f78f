#!/usr/bin/python3
"""Writes the fixtures of tests/test_{npy,csv,wds,tfrecord}.c with writers
independent of sluice: numpy.save/savez, Python's csv and tarfile modules,
and a TFRecord writer following the published format (length, masked
CRC32C of the length, data, masked CRC32C of the data) around
tf.train.Example protos encoded here from example.proto's field numbers.
Deterministic: rerunning gives the same bytes except for the tar files'
and zip members' times, which are fixed below.

    /usr/bin/python3 tests/data/formats/make_fixtures.py  # python3-numpy
"""
import csv
import gzip
import io
import os
import struct
import tarfile
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def out(name):
    return os.path.join(HERE, name)


# --- npy / npz -------------------------------------------------------------
def npy():
    x = np.arange(5 * 3, dtype="<f4").reshape(5, 3) / 4
    np.save(out("x.npy"), x)  # format 1.0
    np.save(out("labels.npy"), np.arange(5, dtype="<i8") * 7 - 3)  # 1-D
    np.save(out("u8cube.npy"), np.arange(4 * 2 * 3, dtype="u1").reshape(4, 2, 3))
    np.save(out("empty.npy"), np.zeros((0, 2), dtype="<i2"))
    # Format 2.0 and 3.0 headers, written by numpy's own format module.
    with open(out("v2.npy"), "wb") as f:
        np.lib.format.write_array(f, np.arange(6, dtype="<i4"), version=(2, 0))
    with open(out("v3.npy"), "wb") as f:
        np.lib.format.write_array(f, np.arange(6, dtype="<u2"), version=(3, 0))
    np.save(out("fortran.npy"), np.asfortranarray(np.ones((2, 3), "<f4")))
    np.save(out("bigendian.npy"), np.arange(4, dtype=">i4"))
    np.save(out("scalar.npy"), np.float32(1.5))
    a = np.arange(6, dtype="<f8").reshape(3, 2)
    b = np.array([10, 20, 30], dtype="<i4")
    np.savez(out("pair.npz"), a=a, b=b)
    np.savez_compressed(out("pair_z.npz"), a=a, b=b)
    np.savez(out("uneven.npz"), a=a, b=np.arange(4))


# --- csv -------------------------------------------------------------------
def csvs():
    rows = [["x", "y", "name"], ["1.5", "7", "plain"],
            ["-2", "0", 'with "quotes", comma'], ["3.25", "-4", "two\nlines"],
            ["0", "9", ""]]
    with open(out("table.csv"), "w", newline="") as f:
        csv.writer(f).writerows(rows)  # RFC 4180 quoting, CRLF line ends
    with open(out("table.tsv"), "w", newline="") as f:
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows(rows)
    with open(out("badrow.csv"), "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(
            [["x", "y"], ["1", "2"], ["3", "oops"], ["5", "6"]])


# --- WebDataset tar shards -------------------------------------------------
def member(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    ti.uname = ti.gname = "sluice"
    tf.addfile(ti, io.BytesIO(data))


def npy_bytes(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def wds():
    for shard in range(3):
        with tarfile.open(out("wds-%06d.tar" % shard), "w",
                          format=tarfile.GNU_FORMAT) as tf:
            for i in range(4):
                k = shard * 4 + i
                key = "sample%04d" % k
                member(tf, key + ".cls", b"%d" % (k % 10))
                member(tf, key + ".txt", ("caption %d" % k).encode())
                member(tf, key + ".x.npy",
                       npy_bytes(np.full((2, 2), k, dtype="<f4")))
    # A long member name (GNU ././@LongLink) and a PAX header.
    long_dir = "d" * 120 + "/"
    with tarfile.open(out("wds-long.tar"), "w", format=tarfile.GNU_FORMAT) as tf:
        for k in range(2):
            member(tf, long_dir + "s%d.cls" % k, b"%d" % k)
            member(tf, long_dir + "s%d.txt" % k, b"t%d" % k)
    with tarfile.open(out("wds-pax.tar"), "w", format=tarfile.PAX_FORMAT) as tf:
        for k in range(2):
            member(tf, long_dir + "s%d.cls" % k, b"%d" % k)
            member(tf, long_dir + "s%d.txt" % k, b"t%d" % k)
    with tarfile.open(out("wds-missing.tar"), "w", format=tarfile.GNU_FORMAT) as tf:
        member(tf, "a.cls", b"1")
        member(tf, "a.txt", b"x")
        member(tf, "b.cls", b"2")


# --- TFRecord --------------------------------------------------------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    b = bytearray()
    while True:
        if n < 0x80:
            b.append(n)
            return bytes(b)
        b.append((n & 0x7F) | 0x80)
        n >>= 7


def ld(field, payload):  # a length-delimited field
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def feature(kind, values):
    if kind == "bytes":  # BytesList { repeated bytes value = 1 }
        return ld(1, b"".join(ld(1, v) for v in values))
    if kind == "float":  # FloatList { repeated float value = 1 [packed] }
        return ld(2, ld(1, b"".join(struct.pack("<f", v) for v in values)))
    # Int64List { repeated int64 value = 1 [packed] }
    return ld(3, ld(1, b"".join(varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)))


def example(features):  # Example { Features features = 1 }
    # Features { map<string, Feature> feature = 1 }
    entries = b"".join(ld(1, ld(1, k.encode()) + ld(2, v))
                       for k, v in sorted(features.items()))
    return ld(1, entries)


def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


def tfrecord():
    recs = []
    for i in range(6):
        recs.append(record(example({
            "image": feature("bytes", [b"img%d" % i]),
            "label": feature("int64", [i - 2]),
            "x": feature("float", [i, i + 0.5, -i]),
        })))
    blob = b"".join(recs)
    with open(out("ex.tfrecord"), "wb") as f:
        f.write(blob)
    with open(out("ex.tfrecord.gz"), "wb") as f:
        f.write(gzip.compress(blob, mtime=0))
    bad = bytearray(blob)
    bad[len(recs[0]) + 20] ^= 0xFF  # a byte of record 1's data
    with open(out("badcrc.tfrecord"), "wb") as f:
        f.write(bytes(bad))


if __name__ == "__main__":
    npy()
    csvs()
    wds()
    tfrecord()
