"""Nsight Systems parser: corpus files, counts against independent sqlite3 queries, the NVTX
projection on a hand-built export, and `.nsys-rep` conversion through the real `nsys`."""
from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import threading
from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import tools

from traceview import duck
from traceview.errors import TraceError
from traceview.load import load
from traceview.parsers import nsys, nsys_export

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "nsys"
A2A = CORPUS / "h100_2gpu_train_a2a_2026.2.sqlite"
NVTX_ONLY_REP = CORPUS / "h200_moe_nvtx_only_2022.4.nsys-rep"
NVFUSER_REP = CORPUS / "h200_nvfuser_2024.6.nsys-rep"
# files that must be refused, and a fragment of the one-line reason
REFUSED = {
    "h200_moe_nvtx_only_2022.4.sqlite": "no CUDA kernel records",
    "h200_moe_nvtx_only_2023.4.sqlite": "no CUDA kernel records",
    "h200_moe_nvtx_only_2022.4.nsys-rep": "no CUDA kernel records",
}
PID = "((({}) >> 24) & 16777215)"


def _nsys_or_fail():
    """The installed nsys; CI must have it (.ci/install-nsys.sh), elsewhere the test is skipped."""
    return tools.nsys()


def _nsys_version(exe) -> tuple[int, ...]:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return tuple(int(x) for x in re.search(r"(\d{4})\.(\d+)", out).groups())


def _corpus_files():
    if not CORPUS.is_dir():
        if tools.in_ci():
            pytest.fail(f"trace corpus missing: {CORPUS}")
        return []
    return sorted(p for p in CORPUS.iterdir() if p.is_file())


def _one_line(e: TraceError):
    msg = str(e)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# ------------------------------------------------------------------------------------ corpus
@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: p.name)
def test_corpus_file_loads_or_is_refused_in_one_line(path):
    if path.name.endswith(".nsys-rep"):
        exe = _nsys_or_fail()
    try:
        prof = load([path])
    except TraceError as e:
        msg = _one_line(e)
        if path.name in REFUSED:
            assert REFUSED[path.name] in msg
        elif path == NVFUSER_REP and _nsys_version(exe) < (2024, 6):
            assert "newer than the installed nsys" in msg and "2024.6.2.25" in msg
        else:
            raise
        return
    assert path.name not in REFUSED
    assert prof.gpu_activities.num_rows > 0
    db = path if path.suffix == ".sqlite" else CORPUS / path.name.replace(".nsys-rep", ".sqlite")
    _check_counts(prof, db)


def _sq(db: Path, sql: str, *params):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def _tables(db):
    return {r[0] for r in _sq(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def _per_pid(db, table, col, where="1"):
    if table not in _tables(db):
        return {}
    return dict(_sq(db, f"SELECT {PID.format(col)} AS p, count(*) FROM {table} WHERE {where} GROUP BY p"))


def _check_counts(prof, db):
    """Rows per rank in each canonical table == rows per process counted by sqlite3 directly."""
    gpu_pids = sorted(set(_per_pid(db, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid")))
    rank_of = {p: i for i, p in enumerate(gpu_pids)}
    if len(gpu_pids) == 1:  # one process: the rank is the recorded or loader-assigned one
        rank_of = {gpu_pids[0]: prof.ranks[0]}
    assert sorted(rank_of.values()) == prof.ranks
    g = prof.gpu_activities.to_pydict()
    for kind, table in (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                        ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
        want = {rank_of[p]: n for p, n in _per_pid(db, table, "globalPid").items()}
        got = Counter(r for r, k in zip(g["rank"], g["kind"], strict=True) if k == kind)
        assert dict(got) == want, kind
    want = {rank_of[p]: n for p, n in _per_pid(db, "CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid").items() if p in rank_of}
    assert dict(Counter(prof.launches.column("rank").to_pylist())) == want
    want = {rank_of[p]: n for p, n in _per_pid(db, "NVTX_EVENTS", "globalTid", "eventType IN (59, 60)").items()
            if p in rank_of}
    assert dict(Counter(prof.cpu_ranges.column("rank").to_pylist())) == want
    want = {rank_of[p]: n for p, n in _per_pid(db, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "globalPid").items()}
    assert dict(Counter(prof.syncs.column("rank").to_pylist())) == want


def test_a2a_two_ranks_with_sendrecv_kernels():
    prof = load([A2A])
    assert prof.ranks == [0, 1]
    meta = prof.meta.to_pylist()
    assert [m["rank_source"] for m in meta] == ["pid order", "pid order"]
    assert [m["device"] for m in meta] == [0, 1]
    assert all(m["source_version"] == "2026.2.1.210 (schema 3.25.0)" for m in meta)
    assert all(m["clock_offset_ns"] == 1779782330176752435 for m in meta)
    assert any("pid order" in w for w in prof.warnings)
    # SendRecv kernels per rank, counted by sqlite3 from the string table
    want = dict(_sq(A2A, f"""SELECT {PID.format('k.globalPid')} p, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                             JOIN StringIds s ON s.id = k.demangledName
                             WHERE s.value LIKE 'ncclDevKernel_SendRecv%' GROUP BY p ORDER BY p"""))
    assert list(want) == [144, 145] and all(n > 0 for n in want.values())
    g = prof.gpu_activities.to_pydict()
    got = Counter(r for r, n in zip(g["rank"], g["name"], strict=True) if n.startswith("ncclDevKernel_SendRecv"))
    assert got == {0: want[144], 1: want[145]}
    # the memcpy names, as Kineto writes them
    names = Counter(n for n, k in zip(g["name"], g["kind"], strict=True) if k != "kernel")
    assert names["Memcpy DtoD (Device -> Device)"] == _sq(A2A, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                                                              "WHERE copyKind = 8")[0][0]
    assert names["Memset (Device)"] == _sq(A2A, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")[0][0]
    runtime = set(prof.launches.column("name").to_pylist())
    assert "cudaLaunchKernel" in runtime and not any(re.search(r"_v\d{4,}$", n) for n in runtime)
    _check_counts(prof, A2A)


def _stack_nesting(db):
    """Second method: per-thread stack sweep in plain Python over sqlite3 rows. Returns
    {(pid, tid, start, end): (depth, parent_key)} for push/pop ranges and
    {(pid, correlation): innermost range key} for runtime calls."""
    ranges = _sq(db, "SELECT globalTid, start, \"end\" FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY rowid")
    calls = _sq(db, "SELECT globalTid, start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    by_thread = defaultdict(list)
    for i, (gt, s, e) in enumerate(ranges):
        by_thread[gt].append((s, 0, -e, i, e))
    for gt, s, corr in calls:
        by_thread[gt].append((s, 1, 0, corr, None))
    nest, owner = {}, {}
    for gt, items in by_thread.items():
        pid, tid = (gt >> 24) & 0xFFFFFF, gt & 0xFFFFFF
        stack = []
        for s, typ, _, ident, e in sorted(items):
            while stack and stack[-1][1] <= s:  # ranges end exclusive
                stack.pop()
            top = (pid, tid, *stack[-1]) if stack else None
            if typ == 0:
                nest[(pid, tid, s, e)] = (len(stack), top)
                stack.append((s, e))
            else:
                owner[(pid, ident)] = top
    return nest, owner


def test_a2a_nesting_and_op_projection_match_a_stack_sweep():
    prof = load([A2A])
    nest, owner = _stack_nesting(A2A)
    r = prof.cpu_ranges.to_pydict()
    key = {i: (p, t, s, e)
           for i, p, t, s, e in zip(r["id"], r["pid"], r["tid"], r["start_ns"], r["end_ns"], strict=True)}
    got = {key[i]: (d, key.get(par)) for i, d, par in zip(r["id"], r["depth"], r["parent_id"], strict=True)}
    assert len(got) == len(nest) == 19118
    assert got == nest
    la = prof.launches.to_pydict()
    got_owner = {(p, c): key.get(o) for p, c, o in zip(la["pid"], la["correlation"], la["op_id"], strict=True)}
    assert got_owner == owner
    assert sum(v is not None for v in owner.values()) > 7000
    # kernels inherit launch and op from the call with their correlation id in their process
    lid = dict(zip(zip(la["pid"], la["correlation"], strict=True), la["id"], strict=True))
    g = prof.gpu_activities.to_pydict()
    pid_of_rank = {m["rank"]: p for m, p in zip(prof.meta.to_pylist(), (144, 145), strict=True)}
    linked = 0
    for rank, corr, launch, op in zip(g["rank"], g["correlation"], g["launch_id"], g["op_id"], strict=True):
        k = (pid_of_rank[rank], corr)
        assert launch == lid.get(k)
        assert key.get(op) == owner.get(k)
        linked += launch is not None
    want = 0
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        want += _sq(A2A, f"""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{table} g WHERE EXISTS (
                    SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = g.correlationId
                    AND {PID.format('r.globalTid')} = {PID.format('g.globalPid')})""")[0][0]
    assert linked == want > 5000


# ------------------------------------------------------------------- hand-built tiny export
def _tiny(path: Path, *, kernels=True, env_rank=True):
    """A minimal export, old-style (EXPORT_META_DATA, no ENUM_* tables, no TARGET_INFO_GPU).
    Thread T1 of process 77: NVTX A [100, 1000) contains B [200, 500). Calls: L1 at 150 on T1
    (inside A only), L2 at 300 on T1 (inside B), L3 at 300 on thread T2 (no range).
    Kernels K1..K3 have the calls' correlation ids 11, 12, 13."""
    gpid = 77 << 24
    t1, t2 = gpid | 77, gpid | 78
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);
        CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER,
            correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER,
            gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER,
            globalTid INTEGER, correlationId INTEGER, nameId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER,
            correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER, srcKind INTEGER,
            dstKind INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER, end INTEGER, deviceId INTEGER,
            streamId INTEGER, correlationId INTEGER, globalPid INTEGER, syncType INTEGER, eventId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT (correlationId INTEGER, globalPid INTEGER, eventId INTEGER,
            streamId INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER,
            textId INTEGER, domainId INTEGER);
    """)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [
        (1, "cudaLaunchKernel_v7000"), (2, "void gemm<float>(float*)"), (3, "gemm"), (4, "nccl:all_to_all"),
        (5, "cudaMemcpyAsync_v3020"), (7, "relu"),
        (8, "cudaEventRecord_v3020")])  # 6 (K3's demangled name) trimmed away
    con.executemany("INSERT INTO EXPORT_META_DATA VALUES (?, ?)",
                    [("EXPORT_PRODUCT_VERSION", "2022.2.1.31"), ("EXPORT_SCHEMA_VERSION", "2.9.1")])
    if env_rank:
        con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [
            ("PROCESS_0:ENVIRONMENT_VARIABLE", 'RANK="3"'), ("PROCESS_0:ENVIRONMENT_VARIABLE", 'WORLD_SIZE="8"')])
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?)", [
        (0, None, 75, "NCCL", t1, None, 1),                                              # domain create
        (100, 1000, 59, "aten::mm, seq = 12, op_id = 5, sizes = [[2, 3], [3, 4]]", t1, None, 0),  # A
        (200, 500, 59, None, t1, 4, 1),                                                  # B, via StringIds
        (250, None, 34, "a mark", t1, None, 0),                                          # mark: not a range
        (2000, None, 59, "never popped", t2, None, 0),                                   # unclosed
        (1000, 1200, 59, "C", t1, None, 0),       # starts as A ends: a sibling of A, not its child
        (400, 400, 59, "Z", t1, None, 0),         # zero-length, inside B
    ])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?)", [
        (150, 160, 0, t1, 11, 1), (300, 310, 0, t1, 12, 1), (300, 320, 0, t2, 13, 1), (600, 700, 0, t1, 14, 5),
        (1000, 1010, 0, t1, 15, 1), (400, 405, 0, t1, 16, 1), (250, 260, 0, t1, 17, 8)])
    if kernels:
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
            (400, 900, 0, 7, 11, gpid, 2, 3, 4, 1, 1, 128, 1, 1),
            (950, 1100, 0, 7, 12, gpid, 2, 3, 8, 2, 1, 256, 1, 1),
            (1200, 1300, 0, 9, 13, gpid, 6, 7, 1, 1, 1, 32, 1, 1)])
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (800, 2500, 0, 9, 14, ?, 4096, 1, 0, 2)", (gpid,))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (330, 340, 0, 9, 13, ?, 2, 5)", (gpid,))
        # event 5 recorded on stream 4 by the call with correlation 17 (at 250, before the wait at 330)
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES (17, ?, 5, 4)", (gpid,))
    con.commit()
    con.close()
    return path


def test_tiny_export_projection_names_and_rank(tmp_path):
    prof = load([_tiny(tmp_path / "tiny.sqlite")])
    r = {row["name"]: row for row in prof.cpu_ranges.to_pylist()}
    assert set(r) == {"aten::mm", "nccl:all_to_all", "never popped", "C", "Z"}
    a, b = r["aten::mm"], r["nccl:all_to_all"]
    assert (r["C"]["depth"], r["C"]["parent_id"], r["Z"]["depth"], r["Z"]["parent_id"]) == (0, None, 2, b["id"])
    assert (a["kind"], a["seq"], a["input_dims"], a["depth"], a["parent_id"], a["domain"]) == \
        ("op", 12, "[[2, 3], [3, 4]]", 0, None, None)
    assert (b["kind"], b["depth"], b["parent_id"], b["domain"]) == ("annotation", 1, a["id"], "NCCL")
    # the unclosed range is clipped to the last timestamp in the file (the memcpy's end), with a warning
    assert r["never popped"]["end_ns"] == 2500
    assert any("never closed" in w for w in prof.warnings)
    launches = {row["correlation"]: row for row in prof.launches.to_pylist()}
    assert launches[11]["name"] == "cudaLaunchKernel" and launches[14]["name"] == "cudaMemcpyAsync"
    assert [launches[c]["op_id"] for c in (11, 12, 13, 14, 15, 16)] == \
        [a["id"], b["id"], None, a["id"], r["C"]["id"], b["id"]]
    g = {row["correlation"]: row for row in prof.gpu_activities.to_pylist()}
    assert [g[c]["op_id"] for c in (11, 12, 13)] == [a["id"], b["id"], None]  # K1 in A, K2 in B, K3 none
    assert [g[c]["launch_id"] for c in (11, 12, 13, 14)] == [launches[c]["id"] for c in (11, 12, 13, 14)]
    assert g[11]["name"] == "void gemm<float>(float*)" and g[11]["grid"] == "4,1,1" and g[12]["block"] == "256,1,1"
    assert g[13]["name"] == "relu"  # demangled name trimmed from StringIds: short name
    assert (g[14]["kind"], g[14]["name"], g[14]["bytes"]) == ("memcpy", "Memcpy HtoD (Pageable -> Device)", 4096)
    (sync,) = prof.syncs.to_pylist()
    assert (sync["kind"], sync["stream"], sync["event_id"], sync["correlation"]) == ("stream_wait_event", 9, 5, 13)
    assert sync["event_stream"] == 4 and launches[17]["name"] == "cudaEventRecord" and launches[17]["op_id"] == b["id"]
    (meta,) = prof.meta.to_pylist()
    assert (meta["rank"], meta["rank_source"], meta["world_size"]) == (3, "env RANK", 8)
    assert meta["source_version"] == "2022.2.1.31 (schema 2.9.1)" and meta["gpu_name"] is None
    assert set(prof.gpu_activities.column("rank").to_pylist()) == {3}


def test_tiny_export_unknown_strings_and_loader_rank(tmp_path):
    db = _tiny(tmp_path / "rank5.sqlite", env_rank=False)
    con = sqlite3.connect(db)
    con.execute("DELETE FROM StringIds WHERE id IN (4, 7)")  # B's text and K3's short name trimmed too
    con.commit()
    con.close()
    prof = load([db])
    assert prof.ranks == [5] and prof.meta.column("rank_source").to_pylist() == ["file name"]
    names = set(prof.cpu_ranges.column("name").to_pylist()) | set(prof.gpu_activities.column("name").to_pylist())
    assert {"<unknown string 4>", "<unknown string 6>"} <= names


def test_tiny_export_nvtx_names_without_string_table_or_text_column(tmp_path):
    """NVTX names are resolved as the rows are read: with no StringIds table every registered name is
    unknown (its id said); with no text column every name comes from StringIds, '' without an id."""
    db = _tiny(tmp_path / "nostrings.sqlite")
    con = sqlite3.connect(db)
    con.execute("DROP TABLE StringIds")
    con.commit()
    con.close()
    r = load([db]).cpu_ranges
    by_start = dict(zip(r.column("start_ns").to_pylist(), r.column("name").to_pylist(), strict=True))
    assert by_start[200] == "<unknown string 4>" and by_start[100] == "aten::mm" and by_start[1000] == "C"
    db = _tiny(tmp_path / "notext.sqlite")
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN text")
    con.commit()
    con.close()
    r = load([db]).cpu_ranges
    by_start = dict(zip(r.column("start_ns").to_pylist(), r.column("name").to_pylist(), strict=True))
    assert by_start[200] == "nccl:all_to_all" and by_start[100] == "" and by_start[400] == ""


def test_event_stream_by_event_sync_id_where_recorded(tmp_path):
    db = _tiny(tmp_path / "syncid.sqlite")
    con = sqlite3.connect(db)
    con.executescript("""
        ALTER TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION ADD COLUMN eventSyncId INTEGER;
        ALTER TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT ADD COLUMN eventSyncId INTEGER;
        UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET eventSyncId = 99;
        UPDATE CUPTI_ACTIVITY_KIND_CUDA_EVENT SET eventSyncId = 98;""")
    # the record the wait is linked to by id: on stream 6, by the call at 600 (after the wait)
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT VALUES (14, ?, 5, 6, 99)", (77 << 24,))
    con.commit()
    con.close()
    (sync,) = load([db]).syncs.to_pylist()
    assert sync["event_stream"] == 6


def test_invalid_utf8_text_is_repaired_not_fatal(tmp_path):
    db = _tiny(tmp_path / "bytes.sqlite")
    con = sqlite3.connect(db)
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(x'41ff42' AS TEXT) WHERE text = 'C'")
    con.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ARGUMENT_0', CAST(x'c328' AS TEXT))")
    con.commit()
    con.close()
    names = load([db]).cpu_ranges.column("name").to_pylist()
    assert "A\ufffdB" in names


def test_no_kernel_table_message(tmp_path):
    for db in (CORPUS / "h200_moe_nvtx_only_2023.4.sqlite", _tiny(tmp_path / "nokern.sqlite", kernels=False)):
        with pytest.raises(TraceError) as e:
            nsys.read(db)
        assert e.value.problem == nsys.NO_KERNELS
        assert "nsys profile -t cuda" in _one_line(e.value)


def test_not_sqlite_and_truncated_files_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a database")
    trunc = tmp_path / "trunc.sqlite"
    trunc.write_bytes(A2A.read_bytes()[:8192])
    for f in (bad, trunc):
        with pytest.raises(TraceError) as e:
            load([f])
        _one_line(e.value)
    assert nsys.sniff(A2A) and not nsys.sniff(bad) and not nsys.sniff(NVTX_ONLY_REP)


# --------------------------------------------------------------------- .nsys-rep via real nsys
@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The temporary folder of tempfile (where exports go without a store), empty, for one test."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def test_report_conversion_by_real_nsys_outside_a_store_leaves_nothing(tmp_path, private_tmp):
    _nsys_or_fail()
    rep = tmp_path / "r" / NVTX_ONLY_REP.name
    rep.parent.mkdir()
    shutil.copyfile(NVTX_ONLY_REP, rep)
    seen = []
    real = nsys._read_db

    def spy(db, path):  # the export exists while it is read, in the temporary folder
        seen.append((db, nsys_export.is_sqlite(db),
                     _sq(db, "SELECT count(*) FROM NVTX_EVENTS") if nsys_export.is_sqlite(db) else None))
        return real(db, path)

    nsys._read_db, saved = spy, nsys._read_db
    try:
        with pytest.raises(TraceError) as e:
            load([rep])
    finally:
        nsys._read_db = saved
    assert e.value.problem == nsys.NO_KERNELS  # converted for real, then refused for its content
    (db, ok, n_nvtx), = seen
    # the export holds what the corpus's own export of that report holds
    assert ok and n_nvtx == _sq(CORPUS / "h200_moe_nvtx_only_2022.4.sqlite", "SELECT count(*) FROM NVTX_EVENTS")
    assert str(db).startswith(str(private_tmp))
    assert list(private_tmp.iterdir()) == [] and list(rep.parent.iterdir()) == [rep]  # removed, nothing beside


def test_report_export_lies_in_the_store_and_is_reused(tmp_path):
    from traceview import executors
    from traceview.store import Store
    _nsys_or_fail()
    rep = tmp_path / "r" / NVTX_ONLY_REP.name
    rep.parent.mkdir()
    shutil.copyfile(NVTX_ONLY_REP, rep)
    root = tmp_path / "store"

    def refused(**kw):
        with executors.configured(executors.RunSettings(store=root, jobs=1)), pytest.raises(TraceError) as e:
            load([rep], **kw)
        assert e.value.problem == nsys.NO_KERNELS

    refused()
    cached = list((root / "exports").iterdir())
    assert cached == [Store(root).export_path(rep)] and nsys_export.is_sqlite(cached[0])
    assert _sq(cached[0], "SELECT count(*) FROM NVTX_EVENTS") == _sq(CORPUS / "h200_moe_nvtx_only_2022.4.sqlite",
                                                                     "SELECT count(*) FROM NVTX_EVENTS")
    assert list(rep.parent.iterdir()) == [rep]
    mtime = cached[0].stat().st_mtime_ns
    # second load: the stored export is reused (nsys is not even looked for: a bogus --nsys is fine)
    refused(nsys_bin=str(tmp_path / "no-such-nsys"))
    assert cached[0].stat().st_mtime_ns == mtime and list((root / "exports").iterdir()) == cached
    # a changed report is exported again and the stale export removed
    os.utime(rep, ns=(mtime, mtime - 10**9))
    refused()
    again = list((root / "exports").iterdir())
    assert len(again) == 1 and again[0] != cached[0] and again == [Store(root).export_path(rep)]


def test_report_newer_than_nsys_says_so_and_leaves_no_file(tmp_path):
    exe = _nsys_or_fail()
    if _nsys_version(exe) >= (2024, 6):
        pytest.skip("installed nsys is new enough to export this report")
    rep = tmp_path / NVFUSER_REP.name
    shutil.copyfile(NVFUSER_REP, rep)
    with pytest.raises(TraceError) as e:
        load([rep])
    msg = _one_line(e.value)
    have = ".".join(map(str, _nsys_version(exe)))
    assert "written by Nsight Systems 2024.6.2.25, newer than the installed nsys " + have in msg
    assert list(tmp_path.iterdir()) == [rep]  # no half-written export


def test_missing_nsys_explains_how_to_proceed(tmp_path, monkeypatch):
    rep = tmp_path / NVTX_ONLY_REP.name
    shutil.copyfile(NVTX_ONLY_REP, rep)
    with pytest.raises(TraceError) as e:
        load([rep], nsys_bin=str(tmp_path / "bin" / "nsys"))
    assert "--nsys" in _one_line(e.value) and "nsys export --type sqlite" in str(e.value)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsys_export, "_NSYS_GLOBS", ())
    with pytest.raises(TraceError) as e:
        load([rep])
    msg = _one_line(e.value)
    assert "not installed" in msg and "install Nsight Systems" in msg and ".sqlite" in msg
    assert list(tmp_path.iterdir()) == [rep]


def test_kernels_ending_before_they_start_become_zero_length(tmp_path):
    """A broken export: every third kernel's end is 100 ns before its start. They load as
    zero-length (warned, with the count), and the whole analysis runs, its parts adding up."""
    from helpers import analyze_paths
    db = tmp_path / "reversed.sqlite"
    shutil.copyfile(A2A, db)
    con = sqlite3.connect(db)
    n = con.execute('SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 3 = 0').fetchone()[0]
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 100 WHERE rowid % 3 = 0')
    con.commit()
    con.close()
    assert n > 100
    doc = analyze_paths([db])
    assert f"{db}: {n} GPU activities end before they start: taken as zero-length" in doc["warnings"]
    for s in doc["steps"]:
        assert s["compute_ns"] + s["exposed_comm_ns"] + s["exposed_memory_ns"] + s["idle_ns"] == s["step_time_ns"]
    for cp in doc["critical_path"]:
        assert sum(cp[k] for k in ("compute_ns", "all_to_all_ns", "other_comm_ns", "launch_bound_ns",
                                   "host_sync_ns", "idle_ns")) == cp["window_ns"]


@pytest.mark.parametrize("compressed", [False, True])
def test_numbered_ids_are_positions_in_the_sort_order(monkeypatch, compressed):
    """Ids come from a sorted table's rowids: over several row groups (sorted in parallel), with many
    ties broken by a second key, each row's id is its position in the order Python's sort gives;
    so too where the table is a large export's, in the compressed catalog and compressed (its
    rowids as they were made)."""
    r = nsys._Reader.__new__(nsys._Reader)
    r.db, r.registered, r.views = (duck.connect() if compressed else duckdb.connect()), set(), set()
    r.store, r.compress = None, compressed
    monkeypatch.setattr(nsys, "COMPRESS_MIN_ROWS", 1_000)
    n = 300_000
    keys = [(i * 7919) % 1000 for i in range(n)]
    r.reg("t", pa.table({"k": pa.array(keys, pa.int64()), "i": pa.array(range(n), pa.int64())}))
    r.numbered("s", "SELECT k, i FROM t ORDER BY k DESC, i")
    expect = {i: pos for pos, i in enumerate(sorted(range(n), key=lambda i: (-keys[i], i)))}
    got = r.db.execute("SELECT id, i FROM s").fetchall()
    assert len(got) == n and all(expect[i] == rid for rid, i in got)
    if compressed:   # (every segment written out by the checkpoint)
        assert r.store is not None
        assert r.db.execute("SELECT bool_and(persistent) FROM pragma_storage_info(?)",
                            [r._rows_table("s")]).fetchall()[0][0]
    r.drop("s", "t")
    assert not r.db.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 's_rows'").fetchall()[0][0]
    if compressed:
        r.db.execute(f"DROP SCHEMA {r.store}")


def test_numbered_in_parts_gives_the_ids_of_one_sort(monkeypatch):
    """Rows sorted and appended one part at a time (the parts split the order's leading key, in its
    order) take the ids that one sort of all of them gives: each row's position in Python's sort."""
    r = nsys._Reader.__new__(nsys._Reader)
    r.db, r.registered, r.views = duck.connect(), set(), set()
    r.store, r.compress = None, True
    monkeypatch.setattr(nsys, "COMPRESS_MIN_ROWS", 1_000)
    n = 200_000
    keys = [(i * 7919) % 1000 for i in range(n)]
    r.reg("t", pa.table({"k": pa.array(keys, pa.int64()), "i": pa.array(range(n), pa.int64())}))
    parts = ["k >= 700", "k >= 200 AND k < 700", "k < 200"]   # k descending: the high keys first
    r.numbered("s", "SELECT k, i FROM t WHERE {part} ORDER BY k DESC, i", parts)
    expect = {i: pos for pos, i in enumerate(sorted(range(n), key=lambda i: (-keys[i], i)))}
    got = r.db.execute("SELECT id, i FROM s").fetchall()
    assert len(got) == n and all(expect[i] == rid for rid, i in got)
    assert r.db.execute("SELECT bool_and(persistent) FROM pragma_storage_info(?)",
                        [r._rows_table("s")]).fetchall()[0][0]   # compressed: 200,000 rows counted over the parts
    r.drop("s", "t")
    r.db.execute(f"DROP SCHEMA {r.store}")


def _repeated_names_export(tmp_path):
    """A copy of the a2a export whose NVTX events are there twice, the copy shifted past the end, so
    every name repeats (as in a long capture of annotations) and parsing by distinct name matters."""
    db = tmp_path / "twice.sqlite"
    shutil.copyfile(A2A, db)
    con = sqlite3.connect(db)
    cols = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
    span = con.execute('SELECT max(coalesce("end", start)) - min(start) + 1 FROM NVTX_EVENTS').fetchone()[0]
    sel = ", ".join(f'"{c}" + {span}' if c in ("start", "end") else f'"{c}"' for c in cols)
    con.execute(f"INSERT INTO NVTX_EVENTS ({', '.join(chr(34) + c + chr(34) for c in cols)}) "
                f"SELECT {sel} FROM NVTX_EVENTS")
    con.commit()
    con.close()
    return db


def test_nvtx_names_parsed_once_per_distinct_name_give_the_rows_parsed_one_by_one(tmp_path, monkeypatch):
    """Two methods: each distinct name parsed once (the parser) and each row parsed (the SQL over
    every row): the same cpu_ranges, dictionaries and codes included."""
    for db in (A2A, _repeated_names_export(tmp_path)):
        by_name = nsys.read(db).cpu_ranges
        with monkeypatch.context() as m:
            m.setattr(nsys._Reader, "parse_names", nsys._Reader._parse_rows)
            by_row = nsys.read(db).cpu_ranges
        assert by_name.num_rows == by_row.num_rows > 0
        for c in ("kind", "name", "seq", "input_dims"):
            a, b = by_name.column(c).combine_chunks(), by_row.column(c).combine_chunks()
            assert a.equals(b), c
    # the copy holds every range twice: each name an even number of times
    assert all(n % 2 == 0 for n in Counter(by_name.column("name").to_pylist()).values())


def test_domains_named_unknown_and_default(tmp_path):
    # ranges in the NCCL domain (created), in domain 9 (never created) and in the default domain (0, NULL)
    path = _tiny(tmp_path / "dom.sqlite")
    con = sqlite3.connect(path)
    (t1,) = con.execute("SELECT globalTid FROM NVTX_EVENTS WHERE text = 'C'").fetchone()
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, NULL, ?)", [
        (1500, 1600, "D9", t1, 9), (1700, 1800, "Dnull", t1, None), (1900, 1950, "D1", t1, 1)])
    con.commit()
    con.close()
    r = {row["name"]: row["domain"] for row in load([path]).cpu_ranges.to_pylist()}
    assert (r["D9"], r["Dnull"], r["D1"], r["C"], r["nccl:all_to_all"]) == \
        ("<unknown domain 9>", None, "NCCL", None, "NCCL")


def test_a_table_read_behind_gives_the_rows_read_in_line_and_close_waits_for_it(tmp_path, monkeypatch):
    """Export.table_behind reads on a connection and thread of its own (the parser reads NVTX_EVENTS
    so while it reads the other tables): the same rows as table(), a refused column said at once,
    an error of the read raised by the function it returns, and close() waiting for a read."""
    db = _tiny(tmp_path / "behind.sqlite")
    con = sqlite3.connect(db)
    (above,), (every,) = (con.execute(f"SELECT count(*) FROM NVTX_EVENTS {w}").fetchone()
                          for w in ("WHERE start > 150", ""))
    con.close()
    assert 0 < above < every
    spec = {"start_ns": "start TIME", "end_ns": "end TIME", "name": "text TEXT", "nothing": "noSuchColumn"}
    src = nsys_export.Export(db)
    try:
        later = src.table_behind("NVTX_EVENTS", spec, "WHERE start > ? ORDER BY rowid", (150,))
        now = src.table("NVTX_EVENTS", spec, "WHERE start > ? ORDER BY rowid", (150,))
        got = later()
        assert got.equals(now) and got.num_rows == above and got.column("nothing").null_count == above
        assert min(got.column("start_ns").to_pylist()) > 150
        with pytest.raises(TraceError, match="no column 'noSuchColumn'"):
            src.table_behind("NVTX_EVENTS", spec, need=("noSuchColumn",))
        assert src.table_behind("NO_SUCH_TABLE", spec)().num_rows == 0
        broken = src.table_behind("NVTX_EVENTS", {"x": "=no_such_function(1) INTEGER"})
        with pytest.raises(nsys_export.adbc_driver_manager.Error):
            broken()
        # close() waits for a read still going on (here held back) before it closes the database
        gate, done = threading.Event(), []
        fetch = src.fetch

        def slow(sql, params=(), con=None):
            gate.wait(5)
            out = fetch(sql, params, con)
            done.append(out.num_rows)
            return out
        monkeypatch.setattr(src, "fetch", slow)
        src.table_behind("NVTX_EVENTS", spec)
        threading.Timer(0.2, gate.set).start()
    finally:
        src.close()
    assert done == [every]


def _rows_table(path: Path, rowids: list[int]) -> Path:
    """NVTX_EVENTS rows at these rowids (start = 10 x rowid, eventType 59 where the rowid is odd)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT)")
    con.executemany("INSERT INTO NVTX_EVENTS (rowid, start, end, eventType, text) VALUES (?, ?, ?, ?, ?)",
                    [(r, 10 * r, 10 * r + 5, 59 if r % 2 else 60, f"r{r}") for r in rowids])
    con.commit()
    con.close()
    return path


def test_a_large_table_is_read_in_ranges_of_rowids_on_threads_and_joined_in_rowid_order(tmp_path, monkeypatch):
    """table_behind(parts=k): the rows of a table of at least 2 x PART_MIN_ROWS rowids read as up to k
    ranges of consecutive rowids, each on a thread, joined in rowid order: the rows one read in rowid
    order gives, whatever the gaps in the rowids; a smaller table in one read; ORDER BY refused."""
    rowids = [r for r in range(3, 40) if r % 7] + [100, 101, 250]   # gaps: 7, 14, ... and 40..99, 102..249
    src = nsys_export.Export(_rows_table(tmp_path / "parts.sqlite", rowids))
    spec = {"start_ns": "start TIME", "event_type": "eventType", "name": "text TEXT"}
    reads: list[tuple[str, tuple]] = []
    fetch = src.fetch

    def counted(sql, params=(), con=None):
        reads.append((sql, params))
        return fetch(sql, params, con)
    monkeypatch.setattr(src, "fetch", counted)
    monkeypatch.setattr(nsys_export, "PART_MIN_ROWS", 50)   # 248 rowids from 3 to 250: 4 ranges of 62
    try:
        whole = src.table("NVTX_EVENTS", spec, "WHERE eventType = ? ORDER BY rowid", (59,))
        reads.clear()
        got = src.table_behind("NVTX_EVENTS", spec, "NOT INDEXED WHERE eventType = ?", (59,), parts=8)()
        assert got.equals(whole) and got.num_rows == sum(1 for r in rowids if r % 2)
        assert got.column("start_ns").to_pylist() == [10 * r for r in rowids if r % 2]
        ranges = sorted(p[1:] for s, p in reads if "rowid BETWEEN" in s)   # (read on threads: in any order)
        assert ranges == [(3, 64), (65, 126), (127, 188), (189, 250)] and len(reads) == 1 + 4   # (248 // 50 ranges)
        reads.clear()   # two cores: two ranges
        assert src.table_behind("NVTX_EVENTS", spec, "WHERE eventType = ?", (59,), parts=2)().equals(whole)
        assert sorted(p[1:] for s, p in reads if "rowid BETWEEN" in s) == [(3, 126), (127, 250)]
        monkeypatch.setattr(nsys_export, "PART_MIN_ROWS", 125)   # fewer than 2 x 125 rowids: one read
        reads.clear()
        assert src.table_behind("NVTX_EVENTS", spec, "WHERE eventType = ?", (59,), parts=4)().equals(whole)
        assert len(reads) == 2 and reads[1][0].endswith(" ORDER BY rowid") and "rowid BETWEEN" not in reads[1][0]
        with pytest.raises(ValueError, match="without ORDER BY"):
            src.table_behind("NVTX_EVENTS", spec, "WHERE eventType = ? ORDER BY rowid", (59,), parts=2)
        # a range whose read fails: its error raised once every range has ended
        monkeypatch.setattr(nsys_export, "PART_MIN_ROWS", 50)
        ended: list[int] = []

        def failing(sql, params=(), con=None):
            if "rowid BETWEEN" in sql and params[1] == 3:
                raise RuntimeError("the first range failed")
            out = fetch(sql, params, con)
            ended.append(out.num_rows)
            return out
        monkeypatch.setattr(src, "fetch", failing)
        later = src.table_behind("NVTX_EVENTS", spec, "WHERE eventType = ?", (59,), parts=4)
        with pytest.raises(RuntimeError, match="first range"):
            later()
        assert len(ended) == 1 + 3   # (the min/max read, then the three other ranges)
    finally:
        src.close()


def test_the_nvtx_rows_read_in_ranges_give_the_profile_of_one_read(monkeypatch):
    """The parser's NVTX_EVENTS read in ranges (a rowid range per core) gives the profile that one read
    gives: every canonical table equal, on the a2a export, its 19,118 NVTX rows cut into 4 ranges. An
    export under PARALLEL_MIN_BYTES is read in one read (no rowid bounds asked for)."""
    monkeypatch.setattr(nsys_export, "PART_MIN_ROWS", 2_000)
    monkeypatch.setattr(nsys, "_cores", lambda: 4)
    cut: list[tuple] = []
    ranges = nsys_export.Export._rowid_ranges

    def seen(self, table, where, parts):
        got = ranges(self, table, where, parts)
        cut.append((table, len(got)))
        return got
    monkeypatch.setattr(nsys_export.Export, "_rowid_ranges", seen)
    one = nsys.read(A2A)
    assert cut == []
    monkeypatch.setattr(nsys, "PARALLEL_MIN_BYTES", 0)   # (a large export's read, here one of 2.6 MB)
    parts = nsys.read(A2A)
    assert cut == [("NVTX_EVENTS", 4)]
    for name in ("gpu_activities", "cpu_ranges", "launches", "syncs", "meta"):
        assert getattr(parts, name).equals(getattr(one, name)), name
    assert parts.warnings == one.warnings
