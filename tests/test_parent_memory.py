"""What keeps the parent of a mapped job small, checked for the answers it gives: the first
event of each rank as a per-rank step, the light Stored's compact pickle, the sort of row
parts (sorted one part at a time and merged) and the mapped tables' pages let go."""
from __future__ import annotations

import pickle
import random

import pyarrow as pa
from helpers import make_profile

from traceview import mapped, schema
from traceview.analysis import capture
from traceview.document import packed
from traceview.engine.session import Session
from traceview.plain_data import scan
from traceview.store import Stored, light


def _rows(n, seed):
    rnd = random.Random(seed)
    return [{"rank": rnd.randrange(5), "step": rnd.randrange(3), "dur_ns": rnd.randrange(20), "ev": {"i": i}}
            for i in range(n)]


def test_first_events_by_hand():
    prof = make_profile(
        cpu=[{"id": 1, "tid": 1, "start_ns": 50, "end_ns": 90, "name": "a"},
             {"id": 2, "tid": 1, "start_ns": 7, "end_ns": 9, "name": "b", "rank": 1}],
        launches=[{"id": 3, "tid": 1, "start_ns": 40, "end_ns": 41, "correlation": 1}],
        gpu=[{"id": 4, "start_ns": 60, "end_ns": 70, "name": "k", "stream": 7, "correlation": 1},
             {"id": 5, "start_ns": 3, "end_ns": 4, "name": "k", "stream": 7, "correlation": 2, "rank": 2}],
        syncs=[{"id": 6, "tid": 1, "start_ns": 30, "end_ns": 35, "kind": "device_synchronize", "rank": 1}],
        ranks=(0, 1, 2, 3))
    want = {0: 40, 1: 7, 2: 3}              # rank 3 records nothing: no entry
    assert capture.first_events(Session(prof)) == want
    assert capture.first_event_ns(prof) == want


def test_a_light_stored_pickles_as_its_meta():
    meta = schema.conform("meta", pa.table({"rank": pa.array([3], pa.int32())}))
    full = {name: schema.empty(name) for name in schema.TABLES}
    full["meta"] = meta
    lt = light(Stored(full, ["w"], None))
    assert lt.max_id == -1
    blob = pickle.dumps(lt)
    assert len(blob) < len(pickle.dumps(lt.tables["meta"])) + 2000
    a, b = pickle.loads(blob), pickle.loads(blob)
    assert a.tables["meta"].equals(meta) and a.warnings == ["w"] and a.max_id == -1
    assert list(a.tables) == sorted(schema.TABLES)
    for name in schema.TABLES:
        if name != "meta":
            assert a.tables[name].num_rows == 0 and a.tables[name].schema == schema.TABLES[name]
            assert a.tables[name] is b.tables[name]             # one shared empty table
    # not light (the tables a worker sends back by value): every table travels as it is
    odd = Stored({"meta": meta, "syncs": pa.table({"x": pa.array([], pa.int8())})}, [], None)
    back = pickle.loads(pickle.dumps(odd))
    assert back.tables["syncs"].schema.names == ["x"] and back.max_id is None


def test_sort_rows_merges_sorted_parts_as_one_stable_sort():
    key = lambda r: (-r["dur_ns"], r["rank"], r["step"])   # noqa: E731
    parts = [_rows(3000, s) for s in (1, 2, 3)]
    parts[1].sort(key=key)                                  # one part already in order
    want = sorted((r for p in parts for r in p), key=key)
    got, keys = packed.sort_rows([packed.row_bytes(p) for p in parts], key, keys=False)
    assert keys is None and type(got) is packed.PackedRows and list(got) == want
    assert [r["ev"]["i"] for r in got] == [r["ev"]["i"] for r in want]      # ties in the parts' order
    one, _ = packed.sort_rows([packed.row_bytes(parts[1])], key, keys=False)
    assert list(one) == parts[1]


def test_mapped_tables_read_after_their_pages_are_let_go(tmp_path):
    t = pa.table({"a": list(range(50_000)), "s": pa.array([f"n{i % 7}" for i in range(50_000)]).dictionary_encode()})
    mapped._write(tmp_path, 0, "gpu_activities", t)
    maps: list = []
    got = mapped._read(tmp_path, 0, "gpu_activities", maps)
    remote = mapped.Remote(tmp_path, [], maps=maps)
    assert len(maps) == 1 and got.equals(t)
    remote.release_pages()
    assert got.equals(t) and pa.compute.sum(got.column("a")).as_py() == 50_000 * 49_999 // 2


def test_spilled_row_parts_come_back_mapped_and_sort_the_same(tmp_path):
    import mmap
    key = lambda r: (-r["dur_ns"], r["rank"], r["step"])   # noqa: E731
    parts = [_rows(5000, s) for s in (4, 5)]
    sent = []
    for i, p in enumerate(parts):
        rb = packed.row_bytes(p)
        rb.spill(str(tmp_path / f"part{i}.rows"))
        sent.append(pickle.dumps(rb))
    assert all(len(b) < 5000 * 12 for b in sent)           # the path and the row ends, not the rows
    back = [pickle.loads(b) for b in sent]
    assert all(type(rb.data) is mmap.mmap for rb in back)
    assert [list(rb) for rb in back] == parts
    got, _ = packed.sort_rows(back, key, keys=False)
    for rb in back:
        rb.release()
    assert list(got) == sorted(parts[0] + parts[1], key=key)
    assert pickle.loads(pickle.dumps(got)) == got
    empty = packed.RowBytes(b"", packed.array("q"), back[0].shape)
    empty.spill(str(tmp_path / "none.rows"))
    assert list(pickle.loads(pickle.dumps(empty))) == []


def test_rows_packed_from_batches_into_a_file(tmp_path):
    """pack_reader: batches of any size give CHUNK rows a chunk, the chunks of pack() of the rows;
    written to a file and mapped, the same rows, pieces and pickle; rows msgpack would not give
    back: None, no file left."""
    rows = _rows(9000, 4)
    t = pa.Table.from_pylist(rows)
    want = packed.pack(rows)
    batches = t.to_batches(max_chunksize=700)
    assert packed.pack_reader(batches)._chunks == want._chunks
    maps: list = []
    got = packed.pack_reader(batches, str(tmp_path / "layers.rows"), maps)
    assert len(maps) == 1 and (tmp_path / "layers.rows").stat().st_size == sum(map(len, want._chunks))
    assert type(got) is packed.PackedRows and len(got) == 9000 and list(got) == rows
    assert got[8999] == rows[8999] and got[1000:1100] == rows[1000:1100] and got == want
    maps[0].madvise(__import__("mmap").MADV_DONTNEED)            # pages let go: read again from the file
    assert list(got) == rows and scan(got) == scan(rows)
    assert b"".join(packed.msgpack_pieces({"layers": got})) == b"".join(packed.msgpack_pieces({"layers": want}))
    assert pickle.loads(pickle.dumps(got)) == rows
    odd = pa.table({"t": pa.array([(1, 2)] * 5000, pa.list_(pa.int64()))}).to_batches()
    assert packed.pack_reader(odd) is not None                 # lists: packable
    dates = pa.table({"d": pa.array([0] * 5000, pa.date32())}).to_batches()   # datetime.date: not plain
    assert packed.pack_reader(dates, str(tmp_path / "d.rows")) is None and list(tmp_path.iterdir()) == \
        [tmp_path / "layers.rows"]


def _reference(parts, key):
    """The stable sort of the parts' rows, one after the other: what merge has always returned."""
    return sorted((r for p in parts for r in p), key=key)


def test_presorted_parts_merge_as_the_stable_sort_of_all_rows(tmp_path):
    """Parts sorted where they were made (packed.presort, as a worker does) merge from their keys
    into the order of the stable sort of every row, ties in the parts' order: interleaved parts
    (Arrow's sort of the keys), parts one after the other, an empty part, spilled and mapped back,
    and a list below MIN_ROWS. Checked against sorted() of the decoded rows."""
    key = lambda r: (-r["dur_ns"], r["rank"], r["step"], r["cause"])   # noqa: E731
    rnd = random.Random(7)
    parts = [[{"rank": rnd.randrange(4), "step": rnd.randrange(3), "dur_ns": rnd.randrange(9),
               "cause": rnd.choice(["idle", "peer_wait", "é"]), "i": (s, i)} for i in range(3000)]
             for s in range(3)]
    for p in parts:
        for r in p:
            r["i"] = list(r["i"])
    want = _reference(parts, key)
    sent = []
    for i, p in enumerate(parts):
        rb, rows = packed.presort(packed.row_bytes(p), key)
        assert rows == sorted(p, key=key) and rb.keys is not None and list(rb) == rows
        rb.spill(str(tmp_path / f"p{i}.rows"))
        sent.append(pickle.loads(pickle.dumps(rb)))
    got, keys = packed.sort_rows(sent, key, keys=False)
    assert keys is None and type(got) is packed.PackedRows and list(got) == want
    assert [r["i"] for r in got] == [r["i"] for r in want]                # ties: the parts' order
    # parts whose keys follow one another: concatenated (one slice a chunk where it can)
    by_rank = [[r for p in parts for r in p if r["rank"] == k] for k in range(4)]
    ck = lambda r: (r["rank"], r["step"])                                  # noqa: E731
    pre = [packed.presort(packed.row_bytes(p), ck)[0] for p in by_rank]
    empty, _ = packed.presort(packed.row_bytes([]), ck)                   # no keys: nothing to sort
    assert type(empty) is packed.RowBytes and empty.keys is None
    got2, _ = packed.sort_rows(pre[:2] + [empty] + pre[2:], ck, keys=False)
    assert list(got2) == _reference(by_rank, ck)
    small, _ = packed.sort_rows([packed.presort(packed.row_bytes(p[:50]), key)[0] for p in parts], key, keys=False)
    assert type(small) is list and small == _reference([p[:50] for p in parts], key)


def test_presort_keeps_no_keys_it_cannot_sort_exactly():
    """Keys holding a float, a bool, None or an int past int64 are not Arrow columns sorted as
    Python sorts them: such a part keeps no keys and merges by decoding its rows, as before."""
    for odd in (1.5, True, None, 2**63):
        rows = [{"a": i % 3, "b": odd if i == 5 else i} for i in range(5000)]
        key = lambda r: (r["a"], r["b"])                                   # noqa: E731
        rb, got = packed.presort(packed.row_bytes(rows), key)
        assert rb.keys is None and got == rows
        if odd is not None:
            merged, _ = packed.sort_rows([rb, packed.row_bytes(rows[:10])], key, keys=False)
            assert list(merged) == sorted(rows + rows[:10], key=key)


def _same_part(a, b) -> None:
    """Two parts are the same bytes, row ends, shape and sort keys (or the same list)."""
    assert type(a) is type(b)
    if type(a) is list:
        assert a == b
        return
    assert bytes(a.data) == bytes(b.data) and list(a.ends) == list(b.ends) and a.shape == b.shape
    assert (a.keys is None) == (b.keys is None)
    if a.keys is not None:
        assert a.keys.equals(b.keys) and a.keys.schema.equals(b.keys.schema)


def test_rows_sorted_as_they_are_packed_are_the_presort_of_their_packing():
    """packed.presorted_row_bytes (a mapped job's worker packs its stall part in merge's order) is
    presort(row_bytes(rows)) without decoding what it packed: the same bytes, ends, shape and keys,
    and the rows in that order; for keys presort cannot sort exactly (left in their order, no
    keys), for rows in order already, for no rows, and for rows msgpack would not give back
    exactly (a tuple: the list itself, unsorted, as row_bytes and presort leave it)."""
    rnd = random.Random(11)
    rows = [{"rank": rnd.randrange(4), "step": rnd.randrange(3), "dur_ns": rnd.randrange(9),
             "cause": rnd.choice(["idle", "peer_wait", "é"]), "evidence": {"x": [i, 0.5], "y": None}}
            for i in range(3000)]
    key = lambda r: (-r["dur_ns"], r["rank"], r["step"], r["cause"])      # noqa: E731
    odd = [{"a": i % 3, "b": 1.5 if i == 5 else i} for i in range(500)]
    in_order = sorted(rows, key=key)
    tupled = rows[:100] + [{"rank": 0, "step": 0, "dur_ns": 1, "cause": "idle", "evidence": (1, 2)}]
    for case, k in ((rows, key), (odd, lambda r: (r["a"], r["b"])), (in_order, key), ([], key), (tupled, key)):
        want_part, want_rows = packed.presort(packed.row_bytes(case), k) if type(packed.row_bytes(case)) \
            is packed.RowBytes else (case, case)
        got_part, got_rows = packed.presorted_row_bytes(case, k)
        _same_part(got_part, want_part)
        assert got_rows == want_rows
    part, got = packed.presorted_row_bytes(rows, key)
    assert got == in_order and part.keys is not None and list(part) == in_order   # (sorted, stably)
    assert packed.presorted_row_bytes(tupled, key)[0] is tupled                  # (not packable: as given)
