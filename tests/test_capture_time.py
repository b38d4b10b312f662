"""The report records when each trace was captured (inputs[].capture_*), checked against the raw
files read here with json/sqlite3, not through the parsers."""
import datetime as dt
import gzip
import json
import os
import sqlite3

import pytest
from helpers import ROOT, TRACES, make_profile

from traceview.analysis.analyze import inputs_section
from traceview.analysis.capture import job_capture_ns
from traceview.analysis.pipeline import AnalyzeOptions, run_analyze

FIXTURE = ROOT / "fixtures" / "h200_moe_overlap.json.gz"
DLRM0 = TRACES / "kineto" / "dlrm_8rank_v100" / "worker0_step_12.1694128201545.pt.trace.json.gz"
A2A = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
CLOVER = TRACES / "nsys" / "a100_cloverleaf_2024.5.sqlite"
NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
               "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")


def _kineto_first_event_ns(path):
    """epoch ns of the earliest complete event that is not the profiler's own `Trace` span."""
    d = json.load(gzip.open(path))
    first_us = min(e["ts"] for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace")
    return (d.get("baseTimeNanoseconds") or 0) + round(first_us * 1000)


def _iso(ns):
    return dt.datetime.fromtimestamp(ns // 1000 / 1e6, tz=dt.UTC).isoformat(timespec="microseconds") \
        .replace("+00:00", "Z")


def _one(path):
    return run_analyze([str(path)], AnalyzeOptions())


def test_kineto_with_base_time():
    doc = _one(FIXTURE)
    (i,) = doc["inputs"]
    want = _kineto_first_event_ns(FIXTURE)
    assert i["capture_epoch_ns"] == want
    assert i["capture_time"] == _iso(want)
    assert i["capture_source"].startswith("trace:") and "baseTimeNanoseconds" in i["capture_source"]
    # the recording was made on 2026-11-30 (shared/traces/README.md: recorded for this project)
    assert i["capture_time"].startswith("2026-11-30T")
    assert job_capture_ns(doc) == want


def test_kineto_epoch_timestamps_without_base_time():
    """Older Kineto files carry epoch microseconds; the file name holds the export time in epoch ms,
    which comes just after the capture."""
    from traceview.load import load
    (i,) = inputs_section(load([str(DLRM0)]))
    assert i["capture_epoch_ns"] == _kineto_first_event_ns(DLRM0)
    exported_ns = int(DLRM0.name.split(".")[1]) * 10 ** 6
    assert 0 <= exported_ns - i["capture_epoch_ns"] < 10 ** 9
    assert i["capture_source"] == "trace: first event (epoch timestamps)"


@pytest.mark.parametrize("path", [A2A, CLOVER], ids=["a2a_2rank", "cloverleaf"])
def test_nsys_session_start_plus_first_event(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    start = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    first = min(v for t in NSYS_TABLES if t in have
                for (v,) in [con.execute(f"SELECT min(start) FROM {t}").fetchone()] if v is not None)
    from traceview.load import load
    inputs = inputs_section(load([str(path)]))
    assert all(i["capture_source"].startswith("trace: session start") for i in inputs)
    assert all(i["capture_epoch_ns"] >= start for i in inputs)
    assert min(i["capture_epoch_ns"] for i in inputs) == start + first
    assert job_capture_ns({"inputs": inputs}) == start + first


def test_no_clock_in_the_trace_falls_back_to_mtime(tmp_path):
    d = json.loads((ROOT / "fixtures" / "generated" / "tiny_breakdown.json").read_text())
    del d["baseTimeNanoseconds"]
    p = tmp_path / "noclock.json"
    p.write_text(json.dumps(d))
    when = 1_700_000_000_123_456_789
    os.utime(p, ns=(when, when))
    doc = _one(p)
    (i,) = doc["inputs"]
    assert i["capture_source"].startswith("file mtime")
    assert i["capture_epoch_ns"] == when
    assert i["capture_time"] == "2023-11-14T22:13:20.123456Z"


def test_unknown_when_no_clock_and_no_file():
    prof = make_profile(gpu=[{"id": 1, "start_ns": 10, "end_ns": 20, "name": "k", "stream": 7}])
    (i,) = inputs_section(prof)
    assert i["capture_epoch_ns"] is None and i["capture_time"] is None
    assert i["capture_source"].startswith("unknown")
    assert job_capture_ns({"inputs": [i]}) is None


def test_capture_fields_validate_against_the_schema():
    import jsonschema
    from reports_support import schema
    doc = json.loads(json.dumps(_one(FIXTURE), default=str))
    jsonschema.validate(doc, schema())
    doc["inputs"][0]["capture_time"] = "yesterday"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema())
