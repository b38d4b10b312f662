"""The Kineto parser decodes events a chunk at a time into Arrow columns: chunk boundaries must not
change a value, an id or an order; the fast paths (C-speed routing, raw text in one decode, ISA-L's
inflater) must give what the one-by-one paths give."""
from __future__ import annotations

import gzip
import json
import sys
import threading
import zlib

import msgspec
import pyarrow as pa
import pytest
from helpers import TRACES

from traceview.errors import TraceError
from traceview.parsers import bounded_read, kineto

TABLES = ("gpu_activities", "cpu_ranges", "launches", "syncs", "meta")


def _write(tmp_path, events, name="t.json"):
    f = tmp_path / name
    f.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return f


def _events(n_steps: int) -> list:
    """n_steps of: an op (External id k) launching a kernel (correlation k), on one thread."""
    out = []
    for k in range(1, n_steps + 1):
        t = k * 100
        out.append({"ph": "X", "cat": "cpu_op", "name": f"aten::mm{k}", "pid": 1, "tid": 7, "ts": t, "dur": 50,
                    "args": {"External id": k, "Input Dims": [[k, 2], [2, 3]]}})
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7,
                    "ts": t + 10, "dur": 5, "args": {"External id": k, "correlation": 1000 + k}})
        out.append({"ph": "X", "cat": "kernel", "name": f"gemm{k}", "pid": 0, "tid": 3, "ts": t + 20, "dur": 30.5,
                    "args": {"correlation": 1000 + k, "device": 0, "stream": 3, "grid": [k, 1, 1]}})
        out.append({"ph": "i", "cat": "python_function", "name": "marker", "pid": 1, "tid": 7, "ts": t})
    return out


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1 << 16])
def test_chunk_size_changes_nothing(tmp_path, monkeypatch, chunk):
    f = _write(tmp_path, _events(6))
    monkeypatch.setattr(kineto, "CHUNK_EVENTS", chunk)
    p = kineto.read(f)
    g, c, la = (p.gpu_activities.to_pydict(), p.cpu_ranges.to_pydict(), p.launches.to_pydict())
    # by hand: ids run GPU activities 0-5, launches 6-11, (no syncs), CPU ranges 12-17, in file order
    assert g["id"] == list(range(6)) and la["id"] == list(range(6, 12)) and c["id"] == list(range(12, 18))
    assert g["name"] == [f"gemm{k}" for k in range(1, 7)]
    assert g["start_ns"] == [(k * 100 + 20) * 1000 for k in range(1, 7)]
    assert g["end_ns"] == [(k * 100 + 50) * 1000 + 500 for k in range(1, 7)]
    assert g["grid"] == [f"{k},1,1" for k in range(1, 7)]
    assert g["launch_id"] == list(range(6, 12)) and g["op_id"] == list(range(12, 18))
    assert la["op_id"] == list(range(12, 18))
    assert c["input_dims"] == [f"[[{k}, 2], [2, 3]]" for k in range(1, 7)]


def test_chunks_match_one_chunk_on_a_real_trace(monkeypatch):
    f = TRACES / "kineto" / "hta_nccl_parser_config" / "nccl_data.json.gz"
    whole = kineto.read(f)
    monkeypatch.setattr(kineto, "CHUNK_EVENTS", 997)  # a prime: boundaries fall everywhere
    parts = kineto.read(f)
    for t in TABLES:
        assert getattr(whole, t).equals(getattr(parts, t)), t
    assert whole.warnings == parts.warnings


def test_an_event_that_is_not_an_object_is_named_by_its_index(tmp_path, monkeypatch):
    ev = _events(3)
    ev.insert(9, 5)
    f = _write(tmp_path, ev)
    monkeypatch.setattr(kineto, "CHUNK_EVENTS", 4)  # index 9 is the second event of the third chunk
    with pytest.raises(TraceError, match=r"not a Kineto trace .*\$\.traceEvents\[9\]"):
        kineto.read(f)


def test_odd_ph_and_cat_types_are_routed_one_by_one(tmp_path):
    ev = _events(2)
    ev.append({"ph": 5, "cat": "kernel", "name": "k", "ts": 1, "dur": 1})  # not a string: routed nowhere
    ev.append({"ph": "X", "cat": ["kernel"], "name": "k", "ts": 1, "dur": 1})  # unhashable: nowhere
    ev.append({"ph": "X", "cat": "KERNEL", "name": "upper", "pid": 0, "tid": 3, "ts": 900, "dur": 1,
               "args": 7})  # category case-insensitive; args not an object: none
    p = kineto.read(_write(tmp_path, ev))
    g = p.gpu_activities.to_pydict()
    assert g["name"] == ["gemm1", "gemm2", "upper"]
    assert g["correlation"] == [1001, 1002, None] and g["stream"] == [3, 3, 3]
    assert any("1 GPU activities without a correlation" in w for w in p.warnings)


def test_raw_texts_are_decoded_at_once_or_one_by_one():
    """Raw texts are joined on a control byte that valid JSON never holds unescaped (the decoder
    refuses such a file); were one there, each text is decoded by itself."""
    import msgspec
    vals = [msgspec.Raw(b"[[1, 2]]"), msgspec.Raw(b""), msgspec.Raw(b'["\xc3\xa9"]'), msgspec.Raw(b'["a\x1fb"]')]
    want = ["[[1, 2]]", None, '["\u00e9"]', '["a\x1fb"]']
    assert kineto._raw_texts(vals).to_pylist() == want
    assert kineto._raw_texts(vals[:3]).to_pylist() == want[:3]
    assert kineto._raw_texts([]).to_pylist() == []


def test_an_unescaped_control_byte_is_refused(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": _events(2)}).replace("aten::mm1", "aten\x1fmm1"))
    with pytest.raises(TraceError, match="not valid JSON"):
        kineto.read(f)


@pytest.mark.parametrize("inflater", ["stdlib", "isal"])
def test_both_inflaters_give_the_same_bytes_and_refusals(tmp_path, monkeypatch, inflater):
    if inflater == "stdlib":
        monkeypatch.setattr(bounded_read, "_inflater", zlib)
    else:
        isal_zlib = pytest.importorskip("isal.isal_zlib")
        monkeypatch.setattr(bounded_read, "_inflater", isal_zlib)
    text = json.dumps({"traceEvents": _events(50)}).encode()
    f = tmp_path / "t.json.gz"
    f.write_bytes(gzip.compress(text) + gzip.compress(b" "))  # two members
    assert bytes(bounded_read.read_bytes(f)) == text + b" "
    f.write_bytes(gzip.compress(text)[:-7])
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        bounded_read.read_bytes(f)
    f.write_bytes(gzip.compress(text))
    with pytest.raises(TraceError, match="gzip inflates to more than"):
        bounded_read.read_bytes(f, limit=len(text) - 1)


# --- the streamed read: text cut into batches as it is inflated ---------------------------------

TRICKY = ['k},{"ph": "X"}', 'a"b\\"},{', '"traceEvents": [', "\\", "x}, {y", "é},\n{ü"]


def _tricky_trace(tmp_path, gz: bool, bom: bool = False):
    """Names holding separators, quotes, backslashes and the array's key; args holding objects in a
    list (a `},{` inside an event); top-level keys before and after the array."""
    ev = _events(5)
    for k, name in enumerate(TRICKY):
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 3, "ts": 2000 + k, "dur": 1,
                   "args": {"correlation": 5000 + k, "device": 0, "stream": 3, "list": [{"a": 1}, {"b": [2]}]}})
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU },{ 0", "numSms": 132}]}
    tail = {"distributedInfo": {"rank": 3, "world_size": 8}, "traceName": "t },{ n", "baseTimeNanoseconds": 7}
    text = (json.dumps(head)[:-1] + ', "traceEvents": [\n' + ",\n".join(json.dumps(e) for e in ev) + "\n], "
            + json.dumps(tail)[1:]).encode()
    if bom:
        text = b"\xef\xbb\xbf" + text
    f = tmp_path / ("t.json.gz" if gz else "t.json")
    f.write_bytes(gzip.compress(text) if gz else text)
    return f


def _no_whole_read(monkeypatch):
    def refuse(path):
        raise AssertionError("the streamed read fell back to the whole-file read")
    monkeypatch.setattr(kineto, "_ingest_whole", refuse)


@pytest.mark.parametrize("text_bytes,piece", [(1, 1), (7, 3), (64, 1 << 20), (200, 17), (4 << 20, 1 << 20)])
@pytest.mark.parametrize("gz", [False, True])
def test_batch_and_piece_boundaries_change_nothing(tmp_path, monkeypatch, text_bytes, piece, gz):
    f = _tricky_trace(tmp_path, gz, bom=not gz)
    whole = kineto.Profile(**dict(zip(("warnings", *TABLES), _parts(kineto._ingest_whole, f), strict=True)))
    monkeypatch.setattr(kineto.kineto_stream, "TEXT_BYTES", text_bytes)
    monkeypatch.setattr(bounded_read, "CHUNK", piece)
    _no_whole_read(monkeypatch)
    p = kineto.read(f)
    for t in TABLES:
        assert getattr(p, t).equals(getattr(whole, t)), t
    g = p.gpu_activities.to_pydict()
    assert g["name"] == [f"gemm{k}" for k in range(1, 6)] + TRICKY  # by hand: the names as written
    assert g["correlation"] == [1000 + k for k in range(1, 6)] + [5000 + k for k in range(len(TRICKY))]
    m = p.meta.to_pylist()[0]
    assert (m["rank"], m["world_size"], m["gpu_name"], m["sm_count"], m["clock_offset_ns"]) == (3, 8, "GPU },{ 0",
                                                                                             132, 7)


def _every_phase_events() -> list:
    """`_events(4)` with an event of every other phase of the Trace Event Format (fields and args
    included), ac2g flows, fwdbwd flows (ids of int and str, two of a type that cannot be used) and
    complete events whose category is not a string."""
    from traceview.parsers.kineto_events import OTHER_PHASES
    ev = _events(4)
    for k, ph in enumerate(OTHER_PHASES):
        ev.append({"ph": ph, "cat": "kernel", "name": f"other{k}", "pid": 0, "tid": 3, "ts": 3000 + k, "dur": 1,
                   "id": k, "args": {"correlation": 9000 + k, "External id": 1}})
    ev += [{"ph": "s", "cat": "ac2g", "id": 1001, "pid": 1, "tid": 7, "ts": 110, "name": "ac2g"},
           {"ph": "f", "cat": "ac2g", "id": 1001, "pid": 0, "tid": 3, "ts": 120, "name": "ac2g", "bp": "e"},
           {"ph": "s", "cat": "fwdbwd", "id": 7, "pid": 1, "tid": 7, "ts": 101, "name": "fwdbwd"},
           {"ph": "f", "cat": "fwdbwd", "id": 7, "pid": 1, "tid": 7, "ts": 301, "name": "fwdbwd", "bp": "e"},
           {"ph": "s", "cat": "fwdbwd", "id": "8", "pid": 1, "tid": 7, "ts": 201, "name": "fwdbwd"},
           {"ph": "f", "cat": "fwdbwd", "id": "8", "pid": 1, "tid": 7, "ts": 401, "name": "fwdbwd"},
           {"ph": "t", "cat": "fwdbwd", "id": 9, "pid": 1, "tid": 7, "ts": 401},    # a step: no flow
           {"ph": "X", "cat": "fwdbwd", "name": "x", "pid": 1, "tid": 7, "ts": 401, "dur": 1},  # routed nowhere
           {"ph": "X", "cat": ["kernel"], "name": "k", "ts": 1, "dur": 1},            # unhashable: nowhere
           {"ph": "X", "cat": 7, "name": "k", "ts": 1, "dur": 1},                     # not a string: nowhere
           {"ph": "X", "name": "k", "ts": 1, "dur": 1}]                               # no category: nowhere
    return ev


@pytest.mark.parametrize("bad_flows", [False, True])
def test_every_phase_is_streamed_as_the_whole_read_reads_it(tmp_path, monkeypatch, bad_flows):
    """The stream decodes each phase into what the parser reads of it (kineto_events.STREAM_EVENTS),
    the whole read every field of every event (TypedEvent): the same tables, warnings and flows."""
    ev = _every_phase_events()
    if bad_flows:   # ids and times of a type that cannot be used: counted, one by one
        ev += [{"ph": "s", "cat": "fwdbwd", "id": [1], "tid": 7, "ts": 5}, {"ph": "f", "cat": "fwdbwd", "id": 3,
                                                                            "tid": 7, "ts": "x"}]
    f = _write(tmp_path, ev)
    whole = kineto.Profile(**dict(zip(("warnings", *TABLES), _parts(kineto._ingest_whole, f), strict=True)))
    monkeypatch.setattr(kineto.kineto_stream, "TEXT_BYTES", 700)  # batches of a few events
    _no_whole_read(monkeypatch)
    p = kineto.read(f)
    for t in TABLES:
        assert getattr(p, t).equals(getattr(whole, t)), t
    assert p.warnings == whole.warnings
    # by hand: only _events(4)'s ops, launches and kernels are rows; no event of another phase is
    assert p.gpu_activities.column("name").to_pylist() == [f"gemm{k}" for k in range(1, 5)]
    assert p.cpu_ranges.num_rows == 4 and p.launches.num_rows == 4
    ids = p.cpu_ranges.column("id").to_pylist()   # the fwdbwd pairs: mm1 -> mm3 (id 7), mm2 -> mm4 (id "8")
    assert p.cpu_ranges.column("fwd_id").to_pylist() == [None, None, ids[0], ids[1]]
    odd = [w for w in p.warnings if "fwdbwd flow events with an 'id' or 'ts' of the wrong type" in w]
    assert odd == ([f"{f}: 2 fwdbwd flow events with an 'id' or 'ts' of the wrong type ignored"] if bad_flows else [])


@pytest.mark.parametrize("odd", [{"ph": "Z", "cat": "kernel", "name": "z", "ts": 1, "dur": 1},
                                 {"ph": 5, "cat": "kernel", "name": "five", "ts": 1, "dur": 1},
                                 {"cat": "kernel", "name": "no ph", "ts": 1, "dur": 1}])
@pytest.mark.parametrize("where", ["batch", "tail"])
def test_an_event_the_union_does_not_decode_is_streamed_with_every_field(tmp_path, monkeypatch, odd, where):
    """A phase that is not one of the Trace Event Format's strings (or none): msgspec's tagged union
    refuses it, and that batch (or the text's tail) is decoded into TypedEvent, as the whole read
    decodes every event, and routed as there: the same tables, the file still streamed."""
    ev = _events(6)
    ev.insert(4 if where == "batch" else len(ev), odd)   # the last event: in the tail
    f = _write(tmp_path, ev)
    whole = kineto.Profile(**dict(zip(("warnings", *TABLES), _parts(kineto._ingest_whole, f), strict=True)))
    monkeypatch.setattr(kineto.kineto_stream, "TEXT_BYTES", 900)  # batches of a few events
    _no_whole_read(monkeypatch)
    typed: list = []
    route = kineto._route_chunk
    monkeypatch.setattr(kineto, "_route_chunk", lambda evs, part: (typed.append(len(evs)), route(evs, part))[1])
    p = kineto.read(f)
    assert typed and sum(typed) < len(ev)   # the odd event's batch only
    for t in TABLES:
        assert getattr(p, t).equals(getattr(whole, t)), t
    # by hand: the six ops, launches and kernels; the odd event is routed nowhere
    assert p.gpu_activities.column("name").to_pylist() == [f"gemm{k}" for k in range(1, 7)]
    assert p.cpu_ranges.num_rows == 6 and p.launches.num_rows == 6


def _parts(ingest, f):
    """A Profile's fields built the way kineto.read builds them, from the given ingest."""
    orig = kineto._ingest_stream
    kineto._ingest_stream = ingest
    try:
        p = kineto.read(f)
    finally:
        kineto._ingest_stream = orig
    return (p.warnings, *(getattr(p, t) for t in TABLES))


def test_the_text_is_never_held_whole(tmp_path, monkeypatch):
    """Batches of about TEXT_BYTES: the largest text decoded at once is a batch plus one event."""
    f = _write(tmp_path, _events(3000))
    size = f.stat().st_size
    seen = []
    real = kineto.kineto_stream._decode_batch
    monkeypatch.setattr(kineto.kineto_stream, "_decode_batch", lambda buf, cut: seen.append(cut) or real(buf, cut))
    monkeypatch.setattr(kineto.kineto_stream, "TEXT_BYTES", 16 << 10)
    monkeypatch.setattr(bounded_read, "CHUNK", 4 << 10)
    _no_whole_read(monkeypatch)
    p = kineto.read(f)
    assert p.gpu_activities.num_rows == 3000 and p.cpu_ranges.num_rows == 3000  # by construction
    assert len(seen) > size // (20 << 10)  # many batches over a file of ~1 MB
    assert max(seen) < (16 << 10) + (4 << 10) + 400  # a batch, one piece read past it, one event


def test_a_cut_inside_a_name_is_taken_back(tmp_path, monkeypatch):
    """A `},{` in the name of the last event of a batch: the decoder refuses the cut, the tokenizer
    cuts before that event."""
    f = _tricky_trace(tmp_path, gz=False)
    calls = []
    real = kineto.kineto_stream._exact_cut
    monkeypatch.setattr(kineto.kineto_stream, "_exact_cut", lambda buf: calls.append(1) or real(buf))
    monkeypatch.setattr(kineto.kineto_stream, "TEXT_BYTES", 1)
    _no_whole_read(monkeypatch)
    assert kineto.read(f).gpu_activities.column("name").to_pylist()[5:] == TRICKY
    assert calls  # the tokenizer was needed


@pytest.mark.parametrize("text,msg", [
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1', "not valid JSON"),
    (b'{"traceEvents": [{"ph": "X"}, 5, {"ph": "X"}]}', r"\$\.traceEvents\[1\]"),
    (b'[{"ph": "X"}]', "legacy autograd-profiler export"),
    (b'{"traceEvents": null}', "no 'traceEvents' list"),
    (b'{"traceEvents": [' + b"[" * 100 + b"]" * 100 + b"]}", "nested more than"),
])
def test_malformed_text_is_reported_as_by_the_whole_read(tmp_path, monkeypatch, text, msg):
    f = tmp_path / "bad.json"
    f.write_bytes(text)
    monkeypatch.setattr(kineto.kineto_stream, "TEXT_BYTES", 8)
    with pytest.raises(TraceError, match=msg):
        kineto.read(f)


def test_a_long_run_without_a_separator_is_read_whole(tmp_path, monkeypatch):
    """Past MAX_HELD bytes with no place to cut, the whole read decides (a bomb is refused there
    without being held)."""
    f = tmp_path / "t.json"
    f.write_bytes(b'{"traceEvents": [' + b" " * 5000 + b"]}")
    monkeypatch.setattr(kineto.kineto_stream, "MAX_HELD", 1000)
    monkeypatch.setattr(kineto.kineto_stream, "TEXT_BYTES", 100)
    monkeypatch.setattr(bounded_read, "CHUNK", 512)
    used = []
    real = kineto._ingest_whole
    monkeypatch.setattr(kineto, "_ingest_whole", lambda path: used.append(1) or real(path))
    with pytest.raises(TraceError, match="no GPU activity and no CPU events"):
        kineto.read(f)
    assert used


@pytest.mark.parametrize("piece", [1, 5, 1 << 10, 1 << 20])
def test_pieces_are_the_bytes_read_whole(tmp_path, piece):
    text = json.dumps({"traceEvents": _events(50)}).encode()
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(text[:999]) + gzip.compress(text[999:]) + b"\x00" * 8)  # two members, padding
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    for f in (gz, plain):
        got = list(bounded_read.pieces(f, size=piece))
        assert b"".join(got) == bytes(bounded_read.read_bytes(f)) == text
        assert max(map(len, got)) <= max(piece, 1)
    gz.write_bytes(gzip.compress(text)[:-7])
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        list(bounded_read.pieces(gz, size=piece))
    gz.write_bytes(gzip.compress(text))
    with pytest.raises(TraceError, match="gzip inflates to more than"):
        list(bounded_read.pieces(gz, limit=len(text) - 1, size=piece))


def test_repeating_strings_are_stored_once(tmp_path, monkeypatch):
    """Names, kinds and shapes are dictionary-encoded: each distinct value once, in order of first
    appearance, whatever the batch size; DuckDB reads them as text."""
    ev = _events(4) * 3  # 12 copies of 4 kernel names (the same events, three times)
    monkeypatch.setattr(kineto.kineto_stream, "TEXT_BYTES", 300)
    p = kineto.read(_write(tmp_path, ev))
    name = p.gpu_activities.column("name").combine_chunks()
    assert name.type == pa.dictionary(pa.int32(), pa.string())
    assert name.dictionary.to_pylist() == ["gemm1", "gemm2", "gemm3", "gemm4"]  # by hand: 4 distinct
    assert name.to_pylist() == ["gemm1", "gemm2", "gemm3", "gemm4"] * 3
    dims = p.cpu_ranges.column("input_dims").combine_chunks()
    assert len(dims.dictionary) == 4 and len(dims) == 12
    import duckdb
    con = duckdb.connect()
    con.register("g", p.gpu_activities)
    assert con.execute("SELECT name, count(*) FROM g GROUP BY name ORDER BY name").fetchall() == [
        (f"gemm{k}", 3) for k in range(1, 5)]
    assert con.execute("SELECT typeof(name) FROM g LIMIT 1").fetchone() == ("VARCHAR",)


def _nesting(v) -> int:
    """Levels of arrays and objects of a decoded value (the reference the fast counts are checked by)."""
    if isinstance(v, list):
        return 1 + max((_nesting(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_nesting(x) for x in v.values()), default=0)
    return 0


_LEAVES = (1, 2.5, None, True, "a", "[x]", "{", "}]", "", 'q"uote', "b\\s")


def _random_value(rng, depth: int, leaves: tuple = _LEAVES, p_leaf: float = 0.2):
    if depth == 0 or rng.random() < p_leaf:
        return rng.choice(leaves)
    if rng.random() < 0.5:
        return [_random_value(rng, depth - 1, leaves, p_leaf) for _ in range(rng.randrange(0, 4))]
    return {f"k{i}": _random_value(rng, depth - 1, leaves, p_leaf) for i in range(rng.randrange(0, 4))}


def test_the_stream_depth_check_counts_as_the_decoder_nests():
    """The stream's depth check (bracket kinds as one, strings without brackets dropped at once)
    against the nesting of the decoded value, on random JSON with strings that hold brackets,
    quotes and backslashes, around the limit."""
    import random

    from traceview.parsers import kineto_stream
    rng = random.Random(7)
    for _ in range(400):
        v = _random_value(rng, rng.randrange(0, 9))
        text = json.dumps(v, ensure_ascii=rng.random() < 0.5).encode()
        d = _nesting(v)
        for limit in {max(0, d - 1), d, d + 1}:
            assert kineto_stream.too_deep(text, limit) is (d > limit), (text, limit)
    deep = b'[{"a": "[", "b": ' + b"[" * 70 + b"]" * 70 + b"}]"
    assert kineto_stream.too_deep(deep, 63) and not kineto_stream.too_deep(deep, 72)
    assert not kineto_stream.too_deep(b'[{"a": [1, 2]}, {"b": ', 63)  # a cut inside an event: the decoder refuses it


def test_a_batch_is_closed_only_as_one_complete_value():
    """`_shape` says closed (handed over without a second decode) only for one value whose brackets
    and strings all close within the limit: by hand, a cut inside a string, inside an event, after
    the array (two values), a text with escapes, and one too deep."""
    from traceview.parsers import kineto_stream as ks
    closed, open_, deep = ks._CLOSED, ks._OPEN_OR_UNKNOWN, ks._DEEP
    assert ks._shape(b'[{"a": [1, 2], "b": "x]"}, {"c": {}}]', 63) == closed  # 3 levels, a "]" in a string
    assert ks._shape(b'[{"a": [1, 2]}]', 3) == closed and ks._shape(b'[{"a": [1, 2]}]', 2) == deep
    assert ks._shape(b'[{"a": "x}, {y"]', 63) == open_  # the cut fell inside a string: its quote open
    assert ks._shape(b'[{"a": [{"b": 1}]', 63) == open_  # inside an event: a bracket left open
    assert ks._shape(b'[{"a": 1}], "dev": [{"id": 0}]', 63) == open_  # past the array: two values
    assert ks._shape(b'[{"a": "q\\"uote"}]', 63) == open_  # escapes: not known here (the decoder checks)
    assert ks._shape(b'[' * 70 + b']' * 70, 63) == deep


def _balanced_value(rng, depth: int):
    """Random JSON whose strings hold brackets that pair up among themselves (as a kernel's
    `{lambda()#1}` or `[with T = float]`), or none."""
    return _random_value(rng, depth, (1, 2.5, None, True, "a", "[x]", "{lambda()#1}", "f({a}, [b])", "", "[{}]"), 0.25)


def test_the_fast_closed_check_is_the_exact_count_where_strings_balance():
    """A batch's check says closed at once (`_closed_fast`, the strings' brackets counted with the
    others) exactly where the exact count does, when the strings' brackets pair up among themselves:
    random arrays of such values cut at every comma (as a batch is: the text before it and a "]"),
    and whole, around the nesting limit."""
    import random

    from traceview.parsers import kineto_stream as ks
    rng = random.Random(11)
    checked = closed = 0
    for _ in range(300):
        vals = [_balanced_value(rng, rng.randrange(0, 7)) for _ in range(rng.randrange(1, 5))]
        text = json.dumps(vals).encode()
        d = 1 + max(_nesting(v) for v in vals)
        cuts = [i for i, c in enumerate(text) if c == 0x2C] + [len(text) - 1]
        for cut in cuts:
            t = text[:cut] + b"]"
            for limit in {max(1, d - 1), d, d + 1}:
                fast, exact = ks._shape(t, limit), ks._shape(t, limit, fast=False)
                assert fast == exact, (t, limit)
                checked += 1
                closed += fast == ks._CLOSED
    assert checked > 3000 and 300 < closed < checked   # both answers were seen many times


def test_the_fast_closed_check_may_be_fooled_by_unpaired_brackets_in_strings(tmp_path, monkeypatch):
    """Where a string's brackets do not pair up, the fast check can say closed for a cut inside an
    event (here: between the objects of a list in `args`, the string "}}}" closing what the cut
    leaves open); the exact count says open. The batch is then handed over as it is, its decode
    fails, and the file is read whole: the tables are the whole read's."""
    from traceview.parsers import kineto_stream as ks
    cut_inside = b'[{"a": 1}, {"args": {"l": [{"x": "}}}"}]'
    assert ks._shape(cut_inside, 63) == ks._CLOSED
    assert ks._shape(cut_inside, 63, fast=False) == ks._OPEN_OR_UNKNOWN
    ev = _events(3)
    ev.insert(4, {"ph": "X", "cat": "kernel", "name": "odd", "pid": 0, "tid": 3, "ts": 150, "dur": 1,
                  "args": {"correlation": 9, "l": [{"x": "}}}"}, {"y": 2}]}})
    f = _write(tmp_path, ev)
    whole = kineto.Profile(**dict(zip(("warnings", *TABLES), _parts(kineto._ingest_whole, f), strict=True)))
    # a batch cut at that `},{` is handed over as it is, and its decode refuses it
    text = json.dumps({"traceEvents": ev}).encode()
    buf = bytearray(text[text.index(b"["):])
    cut = buf.index(b'"}}}"}, {') + len(b'"}}}"}')
    handed = ks._batch_text(buf, cut)
    assert handed is not None and handed[0].endswith(b'"}}}"}]')
    with pytest.raises(ks.Fallback):
        ks.decode_text(handed[0])
    # the parse with that cut (each batch handed over, here decoded as the helper does): the whole
    # read's tables, by its fallback
    real_sep = ks._last_sep
    monkeypatch.setattr(ks, "_last_sep", lambda b: (b.index(b'"}}}"}, {') + len(b'"}}}"}'))
                        if b'"}}}"}, {' in b else real_sep(b))
    monkeypatch.setattr(ks, "_decode_batch", lambda b, c: (lambda got: None if got is None else ks.decode_text(got[0]))(
        ks._batch_text(b, c)))
    monkeypatch.setattr(ks, "TEXT_BYTES", 1)
    monkeypatch.setattr(bounded_read, "CHUNK", 16)
    fell_back = []
    real_whole = kineto._ingest_whole
    monkeypatch.setattr(kineto, "_ingest_whole", lambda path: fell_back.append(1) or real_whole(path))
    p = kineto.read(f)
    assert fell_back
    for t in TABLES:
        assert getattr(p, t).equals(getattr(whole, t)), t
    assert "odd" in p.gpu_activities.column("name").to_pylist()


def _hidden_levels(tmp_path, levels: int):
    """A trace whose one odd event nests `levels` arrays in its args, each opened next to a string
    "]" and closed before a string "[": counted with the strings' brackets, the nesting reads as
    one level (the fast check's view); the exact count sees every level."""
    inner = "[]"
    for _ in range(levels):
        inner = f'["]", {inner}, "["]'
    ev = [json.dumps(e) for e in _events(2)]
    last = json.dumps(_events(1)[-1])      # (after the odd one: the tail is a plain event)
    odd = ('{"ph": "X", "cat": "kernel", "name": "deep", "pid": 0, "tid": 3, "ts": 150, "dur": 1, '
           '"args": {"correlation": 9, "x": ' + inner + '}}')
    f = tmp_path / "hidden.json"
    f.write_text('{"traceEvents": [' + ", ".join(ev + [odd, last]) + ']}')
    return f, inner.encode()


@pytest.mark.parametrize("threads", [1, 2])
def test_levels_hidden_behind_unpaired_string_brackets(tmp_path, monkeypatch, threads):
    """What the fast check cannot see (docstring of _closed_fast): levels that strings' unpaired
    brackets hide. Where the decode is bounded by the recursion limit (one thread running Python),
    it refuses them as the whole read does; where the brackets are counted first (another thread
    runs Python), the stream decodes them below the decoder's own limit (the whole read, and the
    exact count, refuse the file for its nesting), and above it the decoder refuses them and the
    file is read whole, which refuses it with the nesting message. Never a crash."""
    from traceview.parsers import kineto_stream as ks
    monkeypatch.setattr(ks.threading, "active_count", lambda: threads)
    bounded = threads == 1 and sys.version_info < (3, 12)
    f, inner = _hidden_levels(tmp_path, 100)
    text = b"[" + inner + b"]"
    assert ks._shape(text, 63) == ks._CLOSED and ks._shape(text, 63, fast=False) == ks._DEEP
    monkeypatch.setattr(ks, "TEXT_BYTES", 64)      # every event in a batch of its own, the last one too
    if bounded:
        with pytest.raises(TraceError, match="nested more than"):
            kineto.read(f)    # streamed: the bounded decode refuses it, then the whole read
    else:
        p = kineto.read(f)    # streamed: decoded (the decoder nests 100 levels)
        assert "deep" in p.gpu_activities.column("name").to_pylist()
    with pytest.raises(TraceError, match="nested more than"):
        kineto._decode(f, bounded_read.read_bytes(f))   # the whole read refuses it
    f, _ = _hidden_levels(tmp_path, 3000)
    with pytest.raises(TraceError, match="nested more than"):
        kineto.read(f)    # past the decoder's limit: its RecursionError, then the whole read's refusal


def test_int_columns_fast_and_one_by_one_agree():
    """The int columns built at C speed (ints and None only) and one value at a time (strings,
    floats, bools) follow the same rules: `_int` of the value, else of the fallback."""
    vals = [3, None, "7", 2.0, True, None, "x"]
    other = [10, 11, 12, 13, 14, "15", 16]
    want_or = [3, 11, 7, 2, None, 15, None]  # the fallback only where the value is absent
    want_either = [3, 11, 7, 2, 14, 15, 16]  # External id: also where it cannot be read
    assert kineto._int_or(vals, other).to_pylist() == want_or
    assert kineto._int_or(vals, other, unreadable_too=True).to_pylist() == want_either
    assert kineto._int_or([1, None], [5, 6]).to_pylist() == [1, 6]
    assert kineto._int_or([1, 2], ["a", None]).to_pylist() == [1, 2]
    assert kineto._opt_ints([1, None, "4", False]).to_pylist() == [1, None, 4, None]


def test_dims_column_matches_one_by_one():
    import msgspec
    raws = [b"[1, 2, 3]", b"", b"7", b'"[1]"', b"[ 4 ,5 ]", b"[]", "[\u00e9]".encode()]
    vals = [msgspec.Raw(r) for r in raws]
    want = ["1,2,3", None, None, None, "4,5", "", None]
    assert kineto._dims_col(vals[:6]).to_pylist() == want[:6]
    assert [kineto._dims(v) for v in vals[:6]] == want[:6]
    assert kineto._dims_col(vals).to_pylist() == [kineto._dims(v) for v in vals]  # not ASCII: one by one
    assert kineto._dims_col([]).to_pylist() == []


def test_the_device_is_the_most_common_one_first_seen_on_ties():
    """`most_common` (Arrow) against `Counter.most_common(1)` (the first seen of equal counts) on
    random device columns with nulls, and by hand."""
    import random
    from collections import Counter
    rng = random.Random(3)
    for _ in range(300):
        vals = [rng.choice([None, 0, 1, 2, 3, 7]) for _ in range(rng.randrange(0, 12))]
        got = kineto.most_common(pa.array(vals, type=pa.int64()))
        want = Counter(v for v in vals if v is not None).most_common(1)
        assert got == (want[0][0] if want else None), vals
    assert kineto.most_common(pa.array([5, 3, 3, 5, None, None, None], type=pa.int64())) == 5  # tie: 5 first
    assert kineto.most_common(pa.array([None], type=pa.int64())) is None


@pytest.mark.parametrize("odd_cat", [False, True])
def test_kinds_follow_the_lower_cased_category_in_order_of_first_appearance(tmp_path, odd_cat):
    """GPU kinds and API kinds from categories written in any case (by hand: kernel, memcpy, kernel,
    memset, memcpy; runtime, driver, runtime), each kind once in its dictionary, in order of first
    appearance; the same where a category of another event is not a string (read one by one)."""
    cats = ["Kernel", "gpu_memcpy", "kernel", "GPU_MEMSET", "Memcpy"]
    ev = [{"ph": "X", "cat": c, "name": f"k{i}", "pid": 0, "tid": 3, "ts": 10 * i, "dur": 5,
           "args": {"correlation": i, "device": 0, "stream": 3}} for i, c in enumerate(cats)]
    ev += [{"ph": "X", "cat": c, "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": 10 * i, "dur": 2,
            "args": {"correlation": i}} for i, c in enumerate(["CUDA_Runtime", "cuda_driver", "cuda_runtime"])]
    if odd_cat:
        ev.append({"ph": "i", "cat": 5, "name": "marker", "pid": 1, "tid": 7, "ts": 0})
    p = kineto.read(_write(tmp_path, ev))
    kind = p.gpu_activities.column("kind").combine_chunks()
    assert kind.to_pylist() == ["kernel", "memcpy", "kernel", "memset", "memcpy"]
    assert kind.dictionary.to_pylist() == ["kernel", "memcpy", "memset"]
    api = p.launches.column("api").combine_chunks()
    assert api.to_pylist() == ["runtime", "driver", "runtime"] and api.dictionary.to_pylist() == ["runtime", "driver"]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_during_the_read_and_as_it_was_after(tmp_path, monkeypatch, enabled):
    """No collector pass while the events are read; the collector's state afterwards is the
    caller's, after a read that fails too."""
    import gc
    seen: list = []
    real = kineto._read

    def watching(path):
        seen.append(gc.isenabled())
        return real(path)

    monkeypatch.setattr(kineto, "_read", watching)
    good, bad = _write(tmp_path, _events(3)), _write(tmp_path, [{"ph": "X", "cat": "kernel", "name": "k",
                                                                "ts": "abc"}], "bad.json")
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        p = kineto.read(good)
        assert gc.isenabled() is enabled
        with pytest.raises(TraceError):
            kineto.read(bad)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False]
    assert p.gpu_activities.num_rows == 3


# --- a batch's nesting bounded as it is decoded (kineto_stream._bounded_events) ---------------

def _random_nested(rng, depth: int) -> bytes:
    """A batch of one event whose nesting reaches `depth` levels (the array the first) through
    arrays and objects, some with strings holding brackets, in its args or at its top, under a key
    the stream decodes or skips; its phase one the union decodes, or not (TypedEvent then)."""
    v = rng.choice(["1", '"s"', "null", "[]", "{}", '"]]]"', '"{["'])
    for _ in range(depth - 3 - (v in ("[]", "{}"))):
        v = ("[" + rng.choice(["1,", '"x",', "", '"]",']) + v + "]" if rng.random() < 0.5
             else f'{{"k{rng.randrange(9)}":' + v + "}")
    key = rng.choice(['"Input Dims"', '"zzz"', '"External id"', '"Concrete Inputs"', '"correlation"'])
    ph = rng.choice(['"X"', '"X"', "5", '"i"', '"s"'])
    body = f'"ph":{ph},"cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"id":1'
    ev = f'{{{body},"args":{{{key}:{v}}}}}' if rng.random() < 0.5 else f"{{{body},{key}:{v}}}"
    return ("[" + ev + "]").encode()


def _deeper(k: int, f, through_c: bool):
    """f() called k frames further down, through C calls between them (map, reduce) or not."""
    if k == 0:
        return f()
    if not through_c:
        return _deeper(k - 1, f, through_c)
    import functools
    if k % 2:
        return list(map(lambda _: _deeper(k - 1, f, through_c), [0]))[0]
    return functools.reduce(lambda a, b: _deeper(k - 1, f, through_c), [0, 1])


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="C recursion does not follow the recursion limit")
@pytest.mark.parametrize("through_c", [False, True])
def test_the_bounded_decode_refuses_exactly_what_the_exact_count_finds_too_deep(through_c):
    """Around the bound (58-69 levels), at stack depths of 0-40 frames, with C calls between them or
    not: the bounded decode accepts a batch exactly where the exact count of its brackets finds it
    within BATCH_DEPTH, and raises RecursionError where not; the recursion limit is put back."""
    import random

    from traceview.parsers import kineto_stream as ks
    rng = random.Random(5 + through_c)
    limit = sys.getrecursionlimit()
    seen = set()
    for _ in range(1500):
        d = rng.randrange(58, 70)
        text = _random_nested(rng, d)
        try:
            got = _deeper(rng.randrange(0, 41), lambda t=text: ks._bounded_events(t), through_c)
            assert got is not ks._UNBOUNDED
            ok = True
        except RecursionError:
            ok = False
        want = ks._shape(text, ks.BATCH_DEPTH, fast=False) != ks._DEEP
        assert ok is want, (d, text)
        seen.add(ok)
        assert sys.getrecursionlimit() == limit
    assert seen == {True, False}


def test_the_recursion_limit_is_put_back_whatever_the_decode_gives():
    from traceview.parsers import kineto_stream as ks
    limit = sys.getrecursionlimit()
    texts = [ks._probe_text(10), ks._probe_text(ks.BATCH_DEPTH + 5),    # decoded; too deep
             b'[{"ph": "X", "name": "a}, {', b'[{"ph": "X"}, 5]']          # not JSON; not an event
    for text in texts:
        try:
            ks._bounded_events(text)
        except (RecursionError, msgspec.DecodeError):   # (a ValidationError is a DecodeError)
            pass
        assert sys.getrecursionlimit() == limit


def test_another_thread_running_python_has_the_brackets_counted_instead(monkeypatch):
    """The recursion limit is the process's: while another thread runs Python, the batch's brackets
    are counted (`_shape`) and the limit is left alone; the same events, the same refusals."""
    from traceview.parsers import kineto_stream as ks
    bounded, counted = [], []
    real_bounded, real_shape = ks._bounded_events, ks._shape
    monkeypatch.setattr(ks, "_bounded_events", lambda t: bounded.append(1) or real_bounded(t))
    monkeypatch.setattr(ks, "_shape", lambda t, limit, fast=True: counted.append(1) or real_shape(t, limit, fast))
    fits, too_deep = ks._probe_text(ks.BATCH_DEPTH), ks._probe_text(ks.BATCH_DEPTH + 1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert len(ks._checked_decode(fits)) == 1
        with pytest.raises(ks.Fallback):
            ks._checked_decode(too_deep)
    finally:
        stop.set()
        other.join()
    assert bounded == [] and len(counted) == 2
    monkeypatch.setattr(ks.threading, "active_count", lambda: 1)
    assert len(ks._checked_decode(fits)) == 1
    with pytest.raises(ks.Fallback):
        ks._checked_decode(too_deep)
    if sys.version_info < (3, 12):     # bounded by the limit, no brackets counted
        assert len(bounded) == 2 and len(counted) == 2


def test_where_no_limit_bounds_the_nesting_the_brackets_are_counted_from_then_on(monkeypatch):
    from traceview.parsers import kineto_stream as ks
    monkeypatch.setattr(ks, "_INEXACT", [])
    monkeypatch.setattr(ks.threading, "active_count", lambda: 1)
    calls = []
    monkeypatch.setattr(ks, "_bounded_events", lambda t: calls.append(1) or ks._UNBOUNDED)
    fits, too_deep = ks._probe_text(ks.BATCH_DEPTH), ks._probe_text(ks.BATCH_DEPTH + 1)
    assert len(ks._checked_decode(fits)) == 1 and ks._INEXACT == [True]
    with pytest.raises(ks.Fallback):
        ks._checked_decode(too_deep)
    assert calls == [1]          # asked once


def test_a_handed_batch_goes_unchecked_and_is_refused_where_decoded():
    """`_batch_text` hands over what the cut gives; `decode_text` refuses a cut inside a string or an
    event (HandedRefused: the parse reads again, checked), a value that is not an event and a batch
    too deep (Fallback: read whole). `_checked_text` (the read again) finds the cut here."""
    from traceview.parsers import kineto_stream as ks
    cases = {
        b'[{"ph": "X", "name": "a"}, {"ph": "X", "name": "x}, {y"}, {"ph": "X"}]': b'"x',   # inside a string
        b'[{"ph": "X", "args": {"l": [{"a": 1}, {"b": 2}]}}, {"ph": "X"}]': b'{"a": 1}',  # inside an event
    }
    for text, before in cases.items():
        buf = bytearray(text[:-1])
        cut = buf.index(b"}, {", buf.index(before)) + 1
        (handed,) = ks._batch_text(buf, cut)
        assert handed == bytes(buf[:cut]) + b"]"
        with pytest.raises(ks.HandedRefused):
            ks.decode_text(handed)
        assert ks._checked_text(buf, cut) is None
    with pytest.raises(ks.Fallback) as e:
        ks.decode_text(b'[{"ph": "X"}, 5]')
    assert type(e.value) is ks.Fallback
    with pytest.raises(ks.Fallback) as e:
        ks.decode_text(ks._probe_text(ks.BATCH_DEPTH + 1))
    assert type(e.value) is ks.Fallback
    deep = bytearray(ks._probe_text(ks.BATCH_DEPTH + 1)[:-1] + b', {"ph": "X"}')
    with pytest.raises(ks.Fallback):
        ks._checked_text(deep, len(deep) - len(b', {"ph": "X"}'))
    assert len(ks.decode_text(ks._checked_text(bytearray(b'[{"ph": "X"}, {"ph": "X"}'), 12)[0])) == 1
