"""Broken Nsight Systems exports (mutated copies of a corpus export) and a hung `nsys export`:
rows with impossible times are dropped and counted, a missing column is named, a WAL export is
read with its log, and the export has a time limit. Counts come from sqlite3 on the same file."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import TRACES, analyze_paths

from traceview.load import load

A2A = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
NVFUSER_REP = TRACES / "nsys" / "h200_nvfuser_2024.6.nsys-rep"
K = "CUPTI_ACTIVITY_KIND_KERNEL"
I64_MAX, I64_MIN = 2 ** 63 - 1, -2 ** 63


def tv(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def assert_refused(r, path, words, out=None):
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(path) in lines[0] and words in lines[0], lines[0]
    if out is not None:
        assert not out.exists()


def mutated(tmp_path, *sql, name="m.sqlite"):
    db = tmp_path / name
    shutil.copyfile(A2A, db)
    con = sqlite3.connect(db)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return db


def loose(table):
    """SQL that re-creates `table` without its NOT NULL constraints (as a damaged export might be)."""
    return (f"CREATE TABLE tmp_loose AS SELECT * FROM {table}", f"DROP TABLE {table}",
            f"ALTER TABLE tmp_loose RENAME TO {table}")


def count(db, sql):
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def kernel_count(prof) -> int:
    return sum(1 for k in prof.gpu_activities.column("kind").to_pylist() if k == "kernel")


def steps_add_up(doc):
    for s in doc["steps"]:
        assert s["compute_ns"] + s["exposed_comm_ns"] + s["exposed_memory_ns"] + s["idle_ns"] == s["step_time_ns"]


def test_kernels_with_null_text_real_or_extreme_times_are_dropped_and_counted(tmp_path):
    db = mutated(tmp_path, *loose(K),
                 f'UPDATE {K} SET start = NULL WHERE rowid % 11 = 0',
                 f'UPDATE {K} SET "end" = NULL WHERE rowid % 13 = 0',
                 f"UPDATE {K} SET start = 'abc' WHERE rowid % 17 = 0",
                 f'UPDATE {K} SET start = 1e300 WHERE rowid % 19 = 0',
                 f'UPDATE {K} SET start = {I64_MAX} WHERE rowid % 23 = 0',
                 f'UPDATE {K} SET "end" = {I64_MIN} WHERE rowid % 29 = 0')
    total = count(A2A, f"SELECT count(*) FROM {K}")
    bad = count(db, f"""SELECT count(*) FROM {K} WHERE typeof(start) != 'integer' OR typeof("end") != 'integer'
                        OR start > 4611686018427387904 OR "end" < -2305843009213693952""")
    hand = count(A2A, f"SELECT count(*) FROM {K} WHERE rowid % 11 = 0 OR rowid % 13 = 0 OR rowid % 17 = 0 "
                      "OR rowid % 19 = 0 OR rowid % 23 = 0 OR rowid % 29 = 0")
    assert bad == hand > 50
    prof = load([db])
    assert kernel_count(prof) == total - bad
    assert f"{db}: {bad} kernels with a missing, non-integer or out-of-range start or end " \
           "(allowed: integer ns within -2^61 .. 2^62) dropped" in prof.warnings
    # 'abc' was not read as 0: the earliest kernel is the earliest valid one
    first = count(db, f"SELECT min(start) FROM {K} WHERE typeof(start) = 'integer' AND start < 4611686018427387904 "
                      """AND typeof("end") = 'integer' AND "end" > -2305843009213693952""")
    starts = [s for s, k in zip(prof.gpu_activities.column("start_ns").to_pylist(),
                                prof.gpu_activities.column("kind").to_pylist(), strict=True) if k == "kernel"]
    assert min(starts) == first > 0
    doc = analyze_paths([db])
    steps_add_up(doc)
    assert max(s["step_time_ns"] for s in doc["steps"]) < 10 ** 12  # no 9.2e12 ms step
    r = tv("analyze", db, "-f", "markdown")
    assert r.returncode == 0 and f"{bad} kernels with a missing" in r.stdout


def test_every_kernel_without_a_valid_time_is_refused_saying_so(tmp_path):
    db = mutated(tmp_path, f"UPDATE {K} SET start = 'x'")
    out = tmp_path / "r.json"
    assert_refused(tv("analyze", db, "-f", "json", "-o", out), db, "has a valid start and end", out)


def test_null_times_in_api_calls_and_nvtx_are_dropped_and_counted(tmp_path):
    db = mutated(tmp_path, *loose("CUPTI_ACTIVITY_KIND_RUNTIME"),
                 'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = NULL WHERE rowid % 7 = 0',
                 "UPDATE NVTX_EVENTS SET start = 'later' WHERE rowid % 5 = 0")
    n_api = count(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start IS NULL")
    n_nvtx = count(db, "SELECT count(*) FROM NVTX_EVENTS WHERE typeof(start) = 'text' AND eventType IN (59, 60)")
    assert n_api > 0 and n_nvtx > 0
    doc = analyze_paths([db])
    assert any(w.startswith(f"{db}: {n_api} CUDA API calls with a missing, non-integer") for w in doc["warnings"])
    assert f"{db}: {n_nvtx} NVTX ranges with a missing, non-integer or out-of-range start dropped" in doc["warnings"]
    steps_add_up(doc)


@pytest.mark.parametrize("table, column", [(K, "start"), (K, "globalPid"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                                           ("StringIds", "value"), ("NVTX_EVENTS", "eventType")])
def test_renamed_required_column_is_named_in_one_line(tmp_path, table, column):
    db = mutated(tmp_path, f'ALTER TABLE {table} RENAME COLUMN "{column}" TO "{column}_renamed"')
    out = tmp_path / "r.json"
    assert_refused(tv("analyze", db, "-f", "json", "-o", out), db, f"table {table} has no column '{column}'", out)


def test_wal_export_is_read_with_its_log_and_left_untouched(tmp_path):
    """Half the kernels are deleted in WAL mode without a checkpoint: the main file alone still
    holds them all (stale); the export with its -wal holds half."""
    src = tmp_path / "live.sqlite"
    shutil.copyfile(A2A, src)
    con = sqlite3.connect(src)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute(f"DELETE FROM {K} WHERE rowid % 2 = 0")
    con.commit()
    left = con.execute(f"SELECT count(*) FROM {K}").fetchone()[0]
    db = tmp_path / "copy" / "export.sqlite"
    db.parent.mkdir()
    shutil.copyfile(src, db)  # copied while the log is live: main file stale, changes in the -wal
    shutil.copyfile(f"{src}-wal", f"{db}-wal")
    con.close()
    before = {p.name: p.read_bytes() for p in db.parent.iterdir()}
    stale = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    assert stale.execute(f"SELECT count(*) FROM {K}").fetchone()[0] == count(A2A, f"SELECT count(*) FROM {K}") > left
    stale.close()
    tmp_before = set(Path(tempfile.gettempdir()).glob("traceview-sqlite-*"))
    assert kernel_count(load([db])) == left
    assert {p.name: p.read_bytes() for p in db.parent.iterdir()} == before  # nothing changed or added
    assert set(Path(tempfile.gettempdir()).glob("traceview-sqlite-*")) <= tmp_before  # copy removed


def test_hung_nsys_export_is_stopped_at_the_time_limit(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    shutil.copyfile(NVFUSER_REP, rep)
    pids = tmp_path / "pids"
    fake = tmp_path / "nsys"
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {pids}\nwait\n")
    fake.chmod(0o755)
    out = tmp_path / "r.json"
    t0 = time.monotonic()
    r = tv("analyze", rep, "--nsys", fake, "-f", "json", "-o", out, env={"TRACEVIEW_NSYS_TIMEOUT": "2"})
    assert time.monotonic() - t0 < 60
    assert_refused(r, rep, "`nsys export` did not finish within 2 s and was stopped", out)
    assert "TRACEVIEW_NSYS_TIMEOUT=SECONDS" in r.stderr
    for pid in map(int, pids.read_text().split()):  # the script and the helper it started are gone
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"process {pid} of the stopped export still runs")
    exports = Path(os.environ["TRACEVIEW_CACHE_DIR"]) / "exports"      # the store's (a temporary folder)
    assert not exports.exists() or not list(exports.iterdir())  # no half-written export left
    r = tv("analyze", rep, "--nsys", fake, env={"TRACEVIEW_NSYS_TIMEOUT": "soon"})
    assert r.returncode == 2 and "TRACEVIEW_NSYS_TIMEOUT='soon'" in r.stderr and len(r.stderr.splitlines()) == 1


def test_a_timestamp_days_away_from_the_rest_is_flagged(tmp_path):
    import gzip
    src = TRACES / "kineto" / "hta_trace_compare_base" / "base.json.gz"
    d = json.loads(gzip.decompress(src.read_bytes()))
    k = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    k[-1]["ts"] += 30 * 24 * 3600 * 10 ** 6  # 30 days later, in µs: within int64 ns, impossible
    f = tmp_path / "far.json"
    f.write_text(json.dumps(d))
    doc = analyze_paths([f])
    assert any(w.startswith(f"{f}: GPU activity spans 720 h") and "corrupt timestamp" in w
               for w in doc["warnings"]), doc["warnings"]
