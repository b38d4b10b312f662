"""The store of parsed tables: reused when the trace is unchanged, parsed again when it changed,
rebuilt when damaged or of another version, safe under two concurrent runs, never beside a corpus trace."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TRACES

from traceview import executors, store as store_mod
from traceview.cli import run_cli
from traceview.load import load

DLRM = TRACES / "kineto" / "dlrm_8rank_v100"
BASE = TRACES / "kineto" / "hta_trace_compare_base" / "base.json.gz"
TEST = TRACES / "kineto" / "hta_trace_compare_test" / "test.json.gz"


def report(tmp_path, *args) -> bytes:
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    assert run_cli(["analyze", *map(str, args), "-f", "json", "-o", str(out), "--jobs", "1"]) == 0
    return out.read_bytes()


def loaded(paths, root):
    """Load under a store; returns the tables and what the map did (from the store / parsed)."""
    with executors.configured(executors.RunSettings(store=root, jobs=1)) as state:
        prof = load(paths)
    return prof, state.stats


def test_dlrm_from_store_is_byte_identical_to_parsing(tmp_path):
    root = tmp_path / "store"
    plain = report(tmp_path, DLRM, "--no-store")
    first = report(tmp_path, DLRM, "--store", root)
    second = report(tmp_path, DLRM, "--store", root)
    assert plain == first == second
    entries = [e for e in (root / "entries").iterdir()]
    assert len(entries) == 8 and store_mod.Store(root).check() == []
    # Hive-partitioned by rank, zstd Parquet, a manifest saying where each came from
    man = json.loads((entries[0] / "manifest.json").read_text())
    rank = man["ranks"][0]
    assert (entries[0] / f"rank={rank}" / "gpu_activities.parquet").is_file()
    # one folder for all of the rank's tables (and one for the tables without a rank: no syncs here)
    assert sorted(p.name for p in entries[0].iterdir() if p.is_dir()) == sorted([f"rank={rank}", "rank=none"])
    assert man["store_schema_version"] == store_mod.STORE_SCHEMA_VERSION and man["format"] == ["kineto"]
    src = Path(man["source"]["path"])
    assert src.parent == DLRM.resolve() and man["source"]["size"] == src.stat().st_size
    assert man["source"]["hash"] == store_mod.file_hash(src)
    # each table file's size and hash (taken as it was encoded, before it was written) are the file's
    for files in man["tables"].values():
        for f in files:
            on_disk = entries[0] / f["file"]
            assert f["size"] == on_disk.stat().st_size and f["hash"] == store_mod.file_hash(on_disk)
    import pyarrow.parquet as pq
    md = pq.ParquetFile(entries[0] / f"rank={rank}" / "gpu_activities.parquet").metadata
    assert md.row_group(0).column(0).compression == "ZSTD"
    # a dictionary page only for the columns that are dictionaries in Arrow (names, kinds); plain
    # values elsewhere; no statistics
    names = md.schema.names
    for i in range(md.num_columns):
        col = md.row_group(0).column(i)
        dictionary = "RLE_DICTIONARY" in col.encodings or "PLAIN_DICTIONARY" in col.encodings
        assert dictionary == (names[i] in {"kind", "name"}), (names[i], col.encodings)
        assert col.statistics is None, names[i]
    _, stats = loaded([DLRM], root)
    assert stats["from_store"] == 8 and stats["parsed"] == 0


def test_tables_round_trip_exactly(tmp_path):
    direct = load([DLRM])
    loaded([DLRM], tmp_path / "s")
    again, stats = loaded([DLRM], tmp_path / "s")
    assert stats["from_store"] == 8
    for name, t in direct.tables().items():
        assert again.tables()[name].equals(t), name
    assert again.warnings == direct.warnings


def test_modified_trace_is_parsed_again(tmp_path):
    trace = tmp_path / "job" / "rank0.json.gz"
    trace.parent.mkdir()
    shutil.copy(BASE, trace)
    root = tmp_path / "store"
    first = report(tmp_path, trace, "--store", root)
    # same content, new mtime: the content hash says it did not change, so it is read from the store
    os.utime(trace, ns=(1, 10**18))
    _, stats = loaded([trace], root)
    assert stats["from_store"] == 1 and stats["parsed"] == 0
    assert report(tmp_path, trace, "--store", root) == first
    # another trace under the same name: parsed again, and the report is that trace's
    shutil.copy(TEST, trace)
    _, stats = loaded([trace], root)
    assert stats["from_store"] == 0 and stats["parsed"] == 1
    expect = tmp_path / "expect" / "rank0.json.gz"
    expect.parent.mkdir()
    shutil.copy(TEST, expect)
    got = json.loads(report(tmp_path, trace, "--store", root))
    want = json.loads(report(tmp_path, expect, "--no-store"))
    assert json.dumps(got).replace(str(trace), "X") == json.dumps(want).replace(str(expect), "X")


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "manifest", "version"])
def test_damaged_entry_is_rebuilt_never_read_short(tmp_path, damage):
    job = tmp_path / "job"
    job.mkdir()
    for f in sorted(DLRM.iterdir())[:2]:          # ranks 0 and 1 of the DLRM job
        shutil.copy(f, job / f.name)
    root = tmp_path / "store"
    plain = report(tmp_path, job, "--no-store")
    report(tmp_path, job, "--store", root)
    entry = next(e for e in (root / "entries").iterdir() if "worker1" in e.name)
    part = next(entry.glob("rank=*/gpu_activities.parquet"))
    if damage == "truncate":
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    elif damage == "flip":
        b = bytearray(part.read_bytes())
        b[len(b) // 2] ^= 0xFF
        part.write_bytes(bytes(b))
    elif damage == "delete":
        part.unlink()
    elif damage == "manifest":
        (entry / "manifest.json").write_text("{")
    else:
        man = json.loads((entry / "manifest.json").read_text())
        man["store_schema_version"] = store_mod.STORE_SCHEMA_VERSION + 1
        (entry / "manifest.json").write_text(json.dumps(man))
    assert store_mod.Store(root).check() != [] or damage == "version"
    _, stats = loaded([job], root)
    assert stats["from_store"] == 1 and stats["parsed"] == 1
    assert store_mod.Store(root).check() == []
    assert report(tmp_path, job, "--store", root) == plain


def test_two_concurrent_analyses_agree_and_leave_a_valid_store(tmp_path):
    root = tmp_path / "store"
    outs = [tmp_path / f"c{i}.json" for i in range(2)]
    env = {**os.environ, "TRACEVIEW_CACHE_DIR": str(tmp_path / "unused")}
    procs = [subprocess.Popen([sys.executable, "-m", "traceview", "analyze", str(DLRM), "-f", "json",
                               "--store", str(root), "--jobs", "1", "-o", str(o)], env=env,
                              stderr=subprocess.PIPE, text=True) for o in outs]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    assert outs[0].read_bytes() == outs[1].read_bytes() == report(tmp_path, DLRM, "--no-store")
    assert store_mod.Store(root).check() == []
    assert len(list((root / "entries").iterdir())) == 8
    assert not (tmp_path / "unused").exists()


def test_default_store_beside_the_input_else_user_cache(tmp_path, monkeypatch):
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(BASE, job / "base.json.gz")
    monkeypatch.delenv("TRACEVIEW_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    report(tmp_path, job / "base.json.gz")
    assert len(list((job / ".traceview" / "entries").iterdir())) == 1
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copy(BASE, ro / "base.json.gz")
    ro.chmod(0o555)
    try:
        report(tmp_path, ro / "base.json.gz")
    finally:
        ro.chmod(0o755)
    assert not (ro / ".traceview").exists()
    assert len(list((tmp_path / "xdg" / "traceview" / "entries").iterdir())) == 1
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "env"))
    assert store_mod.default_dir([job]) == tmp_path / "env"


def test_no_store_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEVIEW_CACHE_DIR", str(tmp_path / "c"))
    report(tmp_path, BASE, "--no-store")
    assert not (tmp_path / "c").exists()
    assert run_cli(["analyze", str(BASE), "--store", str(tmp_path / "x"), "--no-store"]) == 2


def test_suite_never_stores_beside_the_corpus():
    assert os.environ["TRACEVIEW_CACHE_DIR"] and not (DLRM / ".traceview").exists()
    assert not (TRACES / "kineto" / "hta_trace_compare_base" / ".traceview").exists()


def test_finished_document_is_kept_and_keyed_by_traces_and_options(tmp_path):
    from traceview.job_cache import analyze as analyze_job
    from traceview.runs import AnalyzeOptions, run_analyze
    job = tmp_path / "job"
    job.mkdir()
    for f in sorted(DLRM.iterdir())[:2]:
        shutil.copy(f, job / f.name)
    root = tmp_path / "store"
    calls = []

    def once(top=10):
        def counted(paths):
            calls.append(top)
            return run_analyze(paths, AnalyzeOptions(top=top))
        with executors.configured(executors.RunSettings(store=root, jobs=1)) as state:
            doc = analyze_job([str(job)], {"top": top}, counted)
        return doc, state.stats.get("document_from_store", False)

    first, hit1 = once()
    second, hit2 = once()
    assert (hit1, hit2) == (False, True) and first == second and calls == [10]
    other, hit3 = once(top=3)
    assert not hit3 and calls == [10, 3] and other != first
    victim = sorted(job.iterdir())[1]
    victim.write_bytes(sorted(DLRM.iterdir())[2].read_bytes())    # another rank's trace under this name
    _, hit4 = once()
    assert not hit4 and calls == [10, 3, 10]
    # the CLI renders the kept document byte for byte as it rendered the analyzed one
    a = report(tmp_path, job, "--store", root, "--top", "4")
    b = report(tmp_path, job, "--store", root, "--top", "4")
    assert a == b == report(tmp_path, job, "--no-store", "--top", "4")


def test_a_store_that_cannot_be_made_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert run_cli(["analyze", str(BASE), "--store", str(blocker / "store")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot use as the store" in err[0] and str(blocker) in err[0]


A2A = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"     # two ranks in one file


@pytest.mark.parametrize("paths", [[DLRM], [A2A]], ids=["dlrm-8-files", "nsys-2-ranks-1-file"])
def test_a_parse_in_this_process_gives_the_tables_as_the_store_reads_them_back(tmp_path, monkeypatch, paths):
    """A run that parses in its own process stores the tables and goes on with them as the store
    would give them back, without reading its Parquet files (executors._parse `give`): each table
    equals the one a later run reads from the store (Store.lookup: a second method), types and
    dictionaries included, and the first run read no Parquet file."""
    import pyarrow.parquet as pq
    reads = []
    real = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    first, stats = loaded(paths, tmp_path / "s")
    assert stats["parsed"] == stats["files"] and reads == []
    again, stats = loaded(paths, tmp_path / "s")
    assert stats["from_store"] == stats["files"] and reads           # read back this time
    for name, t in again.tables().items():
        got = first.tables()[name]
        assert got.schema.equals(t.schema, check_metadata=True), name
        assert got.equals(t), name
    assert again.warnings == first.warnings


@pytest.mark.parametrize("ranks", [[0, 0, 1, 1, 1, 3], [1, 0, 1, 3, 0, 1], [2, 2, 2], []],
                         ids=["in-order", "interleaved", "one-rank", "empty"])
def test_partitions_hold_each_ranks_rows_and_give_the_table_back_in_its_order(tmp_path, ranks):
    """_write_partitions: one Parquet file per rank holding exactly that rank's rows (counted
    here by hand), and _restore of the files gives the table back row for row (in its order,
    interleaved ranks included)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from traceview import schema
    want = schema.TABLES["syncs"]
    n = len(ranks)
    cols = {f.name: pa.array([i * 10 + 7 for i in range(n)], f.type) for f in want if pa.types.is_integer(f.type)}
    cols["kind"] = pa.array(["event_sync", "stream_sync"] * (n // 2) + ["event_sync"] * (n % 2)).dictionary_encode()
    cols["rank"] = pa.array(ranks, want.field("rank").type)
    table = pa.table({f.name: cols[f.name] for f in want}, schema=want)
    parts = store_mod._write_partitions(tmp_path, "syncs", table)
    expect = {r: ranks.count(r) for r in sorted(set(ranks))} or {None: 0}
    assert [p["file"] for p in parts] == [f"rank={'none' if r is None else r}/syncs.parquet" for r in expect]
    pieces = []
    for p, (r, count) in zip(parts, expect.items(), strict=True):
        t = pq.read_table(tmp_path / p["file"])
        assert p["rows"] == t.num_rows == count
        assert r is None or set(t.column("rank").to_pylist()) == {r}
        pieces.append(t)
    back = store_mod._restore("syncs", pieces)
    assert back.equals(table) and back.column("rank").to_pylist() == ranks


def test_a_put_behind_the_analysis_is_waited_for_by_every_read_and_by_the_end_of_the_run(tmp_path, monkeypatch):
    """The in-process parse stores its tables on a thread (Store.put_behind) while the run goes on:
    the trace's lock is held until they are written, a read of that trace's entry waits for them
    and finds them whole, and no such thread outlives the run (executors.configured)."""
    import fcntl
    import threading
    import time

    from traceview.load import parse_checked
    real = store_mod.Store.put
    started = threading.Event()

    def slow_put(self, *a, **k):
        started.set()
        time.sleep(0.5)
        return real(self, *a, **k)
    monkeypatch.setattr(store_mod.Store, "put", slow_put)
    root = tmp_path / "s"
    f = sorted(DLRM.iterdir())[0]
    other = tmp_path / "other.json.gz"
    shutil.copyfile(BASE, other)

    def putting() -> list:
        return [t for t in threading.enumerate() if t.name == "traceview-store-put"]
    with executors.configured(executors.RunSettings(store=root, jobs=1)):
        kind, got, _ = executors.parse_task(parse_checked, str(f), None, str(root), None, give=True)
        assert kind == "stored" and got.tables["gpu_activities"].num_rows > 0
        assert started.wait(5) and putting()
        store = store_mod.Store(root)
        with open(store.locks / f"{store.key(f)}.lock", "a+b") as lock, pytest.raises(BlockingIOError):
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)      # still held by the put
        back = store.lookup(f)                       # waits for the put, then reads it whole
        assert back is not None and not putting()
        for name, t in back.tables.items():
            assert t.equals(got.tables[name]), name
        with open(store.locks / f"{store.key(f)}.lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)      # let go
        started.clear()
        executors.parse_task(parse_checked, str(other), None, str(root), None, give=True)
        assert started.wait(5) and putting()
    assert not putting()                             # the run's end waited for it
    assert store_mod.Store(root).source_hash(other) == store_mod.file_hash(other)
