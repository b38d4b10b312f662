"""The Kineto parser decodes events a chunk at a time into Arrow columns: chunk boundaries must not
change a value, an id or an order; the fast paths (C-speed routing, raw text in one decode, ISA-L's
inflater) must give what the one-by-one paths give."""
from __future__ import annotations

import gzip
import json
import zlib

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
