"""Rows held packed (document/packed.py), the JSON report written in pieces and the kept document
written in pieces: each compared with what the standard library (json.dumps) or msgspec writes of
the same rows as plain lists."""
from __future__ import annotations

import json
import random
from array import array

import msgspec
import pytest

from reports import json_report
from traceview.document import packed
from traceview.document.packed import PackedRows, msgpack_pieces, pack, pack_lists, plain
from traceview.errors import UsageError
from traceview.output import Pieces, write_file
from traceview.plain_data import scan
from traceview.store import Store


def rows(n: int, seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        out.append({"rank": i % 97, "step": i // 97, "dur_ns": rnd.randrange(10**12),
                    "share": rnd.random(), "cause": rnd.choice(["peer_wait", "compute", "h\u00e9"]),
                    "evidence": {"kernel": f"k{i % 13}", "pieces": [1, 2, i], "none": None, "ok": i % 2 == 0}})
    return out


def stdlib(doc) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()


def test_packed_rows_read_back_as_the_rows():
    r = rows(5000)
    p = pack(r)
    assert type(p) is PackedRows and len(p) == 5000
    assert list(p) == r and p == r and r[4999] == p[-1] and p[1023] == r[1023] and p[1024] == r[1024]
    assert p[1000:3100] == r[1000:3100] and p[::700] == r[::700] and p[4990:9000] == r[4990:]
    with pytest.raises(IndexError):
        p[5000]
    assert sum(len(c) for c in p._chunks) < 0.7 * len(json.dumps(r))   # smaller than its compact JSON
    assert scan(p) == scan(r) and scan({"a": p, "b": 1e-7}).exponent_floats


def test_what_is_not_packed():
    assert pack(rows(100)) == rows(100) and type(pack(rows(100))) is list          # short
    with_tuple = rows(5000)
    with_tuple[7]["evidence"]["pieces"] = (1, 2)
    assert type(pack(with_tuple)) is list                       # msgpack would give a list back
    assert type(pack([1] * 5000)) is list                       # not rows
    assert type(pack(rows(5000) + [{"x": float("nan")}])) is PackedRows   # NaN: packed, the shape says it


def test_scan_flags():
    assert scan({"a": [2**64]}).wide_ints and not scan({"a": [2**64 - 1, -2**63]}).wide_ints
    assert not scan({"a": {1: 2}}).str_keys and scan({"a": {"1": 2}}).str_keys


@pytest.mark.parametrize("n", [0, 5, 1024, 1025, 4096, 5000])
def test_json_in_pieces_is_the_standard_librarys(n):
    doc = {"stalls": rows(n), "zeta": {"tiny": 1e-7, "big": 1e20}, "alpha": [], "name": "a\x7fb\u2028c", "n": 3}
    want = stdlib(doc)
    # DEL, U+2028 as escapes in the report (json_controls): compare the parsed value and the writer
    assert json.loads(json_report.render_bytes(doc)) == json.loads(want)
    assert json_report.render_bytes(doc) == json_report._stdlib(doc).encode()
    pack_lists(doc, ["stalls"])
    assert type(doc["stalls"]) is (PackedRows if n >= packed.MIN_ROWS else list)
    assert b"".join(json_report.pieces(doc)) == json_report._stdlib(plain(doc)).encode()


def test_json_pieces_fall_back_whole():
    doc = {"rows": rows(5000), "k": {1: "int key"}}            # json.dumps writes the key as "1"
    pack_lists(doc, ["rows"])
    assert list(json_report.pieces(doc)) == [json_report._stdlib(plain(doc)).encode()]


def test_msgpack_in_pieces_is_msgspecs():
    doc = {"stalls": rows(5000), "x": {"y": [1, 2.5, None]}, **{f"k{i}": i for i in range(20)}}
    want = msgspec.msgpack.encode(doc)
    pack_lists(doc, ["stalls"])
    assert b"".join(map(bytes, msgpack_pieces(doc))) == want
    assert msgspec.msgpack.decode(want) == plain(doc)


def test_store_keeps_pieces_and_document(tmp_path):
    s = Store(tmp_path / "s")
    assert s.put_kept_pieces("k", "json", [b"ab", memoryview(b"cd"), b""], {"budget_violated": True})
    assert s.get_kept("k", "json") == (b"abcd", {"budget_violated": True})
    doc = {"stalls": rows(5000), "n": 1}
    pack_lists(doc, ["stalls"])
    assert s.put_document("d", doc)
    assert s.get_document("d") == plain(doc)
    w = s.kept_writer("k2", "json")
    w.write(b"half")
    w.abort()
    assert s.get_kept("k2", "json") is None
    assert sorted(p.name for p in (tmp_path / "s" / "jobs").iterdir()) == ["d.document.kept", "k.json.kept"]


def test_write_file_of_pieces(tmp_path):
    out = tmp_path / "r.json"
    write_file(Pieces(lambda: iter([b"{", b"}\n"])), out)
    assert out.read_bytes() == b"{}\n"

    def failing():
        yield b"{"
        raise OSError(28, "No space left on device")
    with pytest.raises(UsageError):
        write_file(Pieces(failing), out)
    assert out.read_bytes() == b"{}\n" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_sort_rows_is_a_stable_sort_of_the_parts():
    parts = [rows(3000, seed=s) for s in (1, 2, 3)]
    for p in parts:
        for r in p:
            r["dur_ns"] %= 7                        # many ties: the order among them is the parts' order
    key = lambda r: (-r["dur_ns"], r["rank"])       # noqa: E731
    want = sorted((r for p in parts for r in p), key=key)
    got, keys = packed.sort_rows([packed.row_bytes(p) for p in parts], key)
    assert type(got) is PackedRows and got == want and keys == [key(r) for r in want]
    small, _ = packed.sort_rows([packed.row_bytes(p[:100]) for p in parts], key)
    assert type(small) is list and small == sorted((r for p in parts for r in p[:100]), key=key)
    mixed, _ = packed.sort_rows([packed.row_bytes(parts[0]), parts[1]], key)
    assert mixed == sorted(parts[0] + parts[1], key=key)
    import pickle
    rb = packed.row_bytes(parts[0])
    assert list(pickle.loads(pickle.dumps(rb))) == parts[0]


def test_pack_table_is_to_pylist():
    import pyarrow as pa
    r = [{"a": i, "s": f"x{i % 5}", "f": i / 3, "b": i % 2 == 0, "n": None if i % 3 else i} for i in range(5000)]
    t = pa.Table.from_pylist(r)
    p = packed.pack_table(t)
    assert type(p) is PackedRows and p == r and scan(p) == scan(r)


def test_pack_reader_lets_go_of_the_scanned_pages_every_release_rows(tmp_path, monkeypatch):
    """pack_reader calls `release` after every RELEASE_ROWS rows read (a mapped job lets go of the
    pages its scan has passed), and the rows are the same as without it."""
    import pyarrow as pa
    monkeypatch.setattr(packed, "RELEASE_ROWS", 1000)
    table = pa.table({"a": list(range(5500)), "b": [f"s{i % 7}" for i in range(5500)]})
    calls = []
    got = packed.pack_reader(table.to_batches(max_chunksize=300), str(tmp_path / "r.rows"), [],
                             lambda: calls.append(1))
    # batches of 300 rows: the count passes 1,000 at 1,200, then (counting afresh) 2,400, 3,600, 4,800
    assert len(calls) == 4
    assert list(got) == table.to_pylist()


def test_the_order_of_spilled_presorted_parts_found_from_their_files_is_the_stable_sort(tmp_path):
    """presorted_order_files (what a mapped job's worker runs for the parent's merge) reads the
    parts' keys from their files and writes the order of the stable sort of all their rows; mapped
    back it is the order sorted() gives by hand (key, then part, then row: parts in order), and
    the merged rows are the rows sorted so."""
    import pickle

    rnd = random.Random(11)
    key = lambda r: (-r["d"], r["r"], r["c"])      # noqa: E731  (the shape of the stalls' merge key)
    parts, rows_of = [], []
    for j in range(4):
        rows = [{"d": rnd.randrange(5), "r": rnd.randrange(3), "c": rnd.choice(["peer_wait", "launch", "é"]),
                 "j": j, "i": i} for i in range(rnd.randrange(0, 400))]
        if not rows:
            parts.append(packed.RowBytes(b"", array("q"), None))      # an empty part: no file
            rows_of.append([])
            continue
        rb, _ = packed.presort(packed.row_bytes(rows), key)
        rb.spill(str(tmp_path / f"p{j}.rows"))
        parts.append(pickle.loads(pickle.dumps(rb)))
        rows_of.append(sorted(rows, key=key))          # a part as its worker sorted it (stably)
    by_hand = sorted(((key(r), j, i) for j, rs in enumerate(rows_of) for i, r in enumerate(rs)),
                     key=lambda t: t[0])
    out = str(tmp_path / "order")
    n = packed.presorted_order_files([(p.path if len(p) else None, len(p)) for p in parts], out)
    assert n == len(by_hand)
    part, index = packed.mapped_order(out, n, [])
    assert list(zip(part, index, strict=True)) == [(j, i) for _, j, i in by_hand]
    local = packed._presorted_order(parts)
    assert (list(local[0]), list(local[1])) == (list(part), list(index))
    merged, _ = packed.sort_rows(parts, key, keys=False, order=lambda ps: packed.mapped_order(
        out, packed.presorted_order_files([(p.path if len(p) else None, len(p)) for p in ps], out), []))
    assert list(merged) == [rows_of[j][i] for _, j, i in by_hand]


def test_spilled_rows_are_the_files_mapped_as_an_unpickling_process_has_them(tmp_path):
    """RowBytes.spilled (a job mapped in its own process: the stall parts it keeps): the rows, their
    order keys and a pickle of it are the spilled part's; its rows are the file's pages, not the
    bytes the part was made of; and it needs a spill first."""
    import mmap
    import pickle
    rows_ = [{"d": i % 4, "r": i, "c": "é" * (i % 3)} for i in range(700)]
    key = lambda r: (-r["d"], r["r"])      # noqa: E731
    rb, _ = packed.presort(packed.row_bytes(rows_), key)
    with pytest.raises(AssertionError):
        rb.spilled()
    rb.spill(str(tmp_path / "p.rows"))
    got = rb.spilled()
    assert type(got.data) is mmap.mmap and type(rb.data) is bytes
    assert list(got) == sorted(rows_, key=key) == list(rb)
    assert got.keys.equals(rb.keys) and list(got.ends) == list(rb.ends)
    assert list(pickle.loads(pickle.dumps(got))) == list(rb)
    assert bytes(got.data) == (tmp_path / "p.rows").read_bytes() == bytes(rb.data)


def test_parts_packed_row_by_row_and_joined_are_pack_readers_chunks():
    """A mapped job's workers pack their batch's rows one msgpack a row (reader_row_bytes) and the
    parent joins the batches' parts (concatenated): the same rows, chunks and msgpack as pack_reader
    over the whole, whatever the parts' sizes (empty, shorter than a chunk, across chunks)."""
    import pyarrow as pa
    whole = rows(9000, seed=7)
    cuts = [0, 0, 1500, 2524, 2524, 5600, 9000]        # parts of 0, 1500, 1024, 0, 3076, 3400 rows
    parts = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        t = pa.Table.from_pylist(whole[a:b]) if b > a else pa.Table.from_pylist(whole[:1]).slice(0, 0)
        got = packed.reader_row_bytes(t.to_batches(max_chunksize=700))
        assert got is not None and len(got) == b - a
        parts.append(got)
    joined = packed.concatenated(parts)
    direct = packed.pack_reader(pa.Table.from_pylist(whole).to_batches(max_chunksize=1000))
    assert list(joined) == whole == list(direct)
    assert [bytes(c) for c in joined.raw_chunks()] == [bytes(c) for c in direct.raw_chunks()]
    assert list(joined.chunks()) == list(direct.chunks())
    assert joined.shape == direct.shape == scan(whole)
    assert b"".join(msgpack_pieces({"x": joined})) == msgspec.msgpack.encode({"x": whole})
    assert joined[4321] == whole[4321] and joined[1499:1501] == whole[1499:1501]


def test_rows_that_cannot_be_packed_give_no_part():
    import decimal

    import pyarrow as pa
    t = pa.table({"d": pa.array([decimal.Decimal("1.5")] * 3, pa.decimal128(5, 1))})
    assert packed.reader_row_bytes(t.to_batches()) is None          # a Decimal: msgpack has none


def test_a_scan_of_rows_about_to_be_encoded_skips_their_ints():
    """scan(rows, ints=False), what the packers run before msgspec encodes the rows: the same shape
    as scan(rows) wherever msgspec can write every int; an int it cannot write is left to msgspec,
    which raises for it (as it did after a full scan: packable never looked at the ints)."""
    rnd = random.Random(3)
    rows = [{"a": rnd.randrange(-2**63, 2**64), "b": [rnd.random() * 10 ** rnd.randrange(-6, 18), None, "x"],
             "c": {"d": rnd.choice([True, 0.0, -2**63, float("nan")])}} for _ in range(500)]
    assert scan(rows, ints=False) == scan(rows) and not scan(rows).wide_ints
    wide = rows + [{"a": 2**64}]
    assert scan(wide).wide_ints and scan(wide, ints=False) == scan(rows)
    for packer in (packed.row_bytes, packed.pack, lambda r: packed.presorted_row_bytes(r, lambda x: 0)):
        with pytest.raises(OverflowError):
            packer(wide * 10)    # (past packed.MIN_ROWS: pack keeps shorter lists as they are)
