"""The SQLite export of an Nsight Systems report is part of the store: made once by the real `nsys`
into DIR/exports/ (under the store's lock), reused while the report is unchanged, not needed at all once
the report's canonical tables are stored; without a store it goes to a temporary folder that is removed.
The reports are copies in temporary folders: nothing is written under ../shared."""
from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import pytest
import tools
from helpers import TRACES

from traceview.cli import run_cli
from traceview.store import Store

MNIST = TRACES / "nsys_reports" / "a100_mnist_train_2022.2.nsys-rep"
NVFUSER_REP = TRACES / "nsys" / "h200_nvfuser_2024.6.nsys-rep"


@pytest.fixture
def rep(tmp_path):
    tools.nsys()
    if not MNIST.is_file():
        pytest.skip(f"report missing: {MNIST}")
    folder = tmp_path / "reports"
    folder.mkdir()
    shutil.copyfile(MNIST, folder / MNIST.name)
    return folder / MNIST.name


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def analyze(tmp_path, *args) -> bytes:
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    assert run_cli(["analyze", *map(str, args), "-f", "json", "-o", str(out), "--jobs", "1"]) == 0
    return out.read_bytes()


def _count(db, sql):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def test_export_lies_in_the_store_and_a_stored_report_needs_neither_it_nor_nsys(tmp_path, rep, private_tmp,
                                                                                monkeypatch):
    root = tmp_path / "store"
    plain = analyze(tmp_path, rep, "--no-store")     # exported to a temporary folder, removed after
    assert list(private_tmp.iterdir()) == [] and list(rep.parent.iterdir()) == [rep]
    first = analyze(tmp_path, rep, "--store", root)
    assert first == plain
    exports = list((root / "exports").iterdir())
    assert exports == [Store(root).export_path(rep)]
    db = exports[0]
    # the stored export is nsys's export of this report: every kernel record in it is a kernel of the tables
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    parts = [pq.read_table(f) for f in (root / "entries").glob("*/rank=*/gpu_activities.parquet")]
    assert _count(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == \
        sum(pc.sum(pc.equal(t.column("kind"), "kernel")).as_py() or 0 for t in parts) > 0
    assert list(rep.parent.iterdir()) == [rep] and list(private_tmp.iterdir()) == []
    assert Store(root).check() == []
    # no nsys from here on: neither on PATH nor by --nsys
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    bogus = str(tmp_path / "no-such-nsys")
    # the canonical tables gone (another traceview version, say): the stored export is read again
    mtime = db.stat().st_mtime_ns
    shutil.rmtree(root / "entries")
    shutil.rmtree(root / "jobs", ignore_errors=True)
    assert analyze(tmp_path, rep, "--store", root, "--nsys", bogus) == plain
    assert list((root / "exports").iterdir()) == [db] and db.stat().st_mtime_ns == mtime
    # the tables stored: the export is not needed at all
    db.unlink()
    shutil.rmtree(root / "jobs", ignore_errors=True)
    assert analyze(tmp_path, rep, "--store", root, "--nsys", bogus) == plain
    assert list((root / "exports").iterdir()) == []


def test_changed_report_is_exported_again_and_the_old_export_dropped(tmp_path, rep):
    root = tmp_path / "store"
    first = analyze(tmp_path, rep, "--store", root)
    old = list((root / "exports").iterdir())
    st = rep.stat()
    os.utime(rep, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))   # touched: the export is stale
    shutil.rmtree(root / "entries")       # (the tables are kept by content hash: make it parse again)
    shutil.rmtree(root / "jobs", ignore_errors=True)
    # a leftover of an export that was killed is removed too (the lock says no one else writes it)
    leftover = root / "exports" / f".{Store(root).export_path(rep).name}.99999.tmp.sqlite"
    leftover.write_bytes(b"half")
    assert analyze(tmp_path, rep, "--store", root) == first
    now = list((root / "exports").iterdir())
    assert len(old) == len(now) == 1 and now != old and now == [Store(root).export_path(rep)]


def test_default_store_beside_the_report_holds_the_export(tmp_path, rep, monkeypatch):
    monkeypatch.delenv("TRACEVIEW_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    analyze(tmp_path, rep)
    store = rep.parent / ".traceview"
    assert list((store / "exports").iterdir()) == [Store(store).export_path(rep)]
    assert sorted(p.name for p in rep.parent.iterdir()) == sorted([rep.name, ".traceview"])
    assert not (tmp_path / "xdg").exists()


def test_failed_export_leaves_nothing_in_the_store(tmp_path, private_tmp):
    exe = tools.nsys()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    if tuple(int(x) for x in re.search(r"(\d{4})\.(\d+)", out).groups()) >= (2024, 6):
        pytest.skip("installed nsys is new enough to export this report")
    rep = tmp_path / NVFUSER_REP.name
    shutil.copyfile(NVFUSER_REP, rep)
    root = tmp_path / "store"
    assert run_cli(["analyze", str(rep), "--store", str(root), "-f", "json", "-o", str(tmp_path / "o.json")]) == 2
    assert not (tmp_path / "o.json").exists()
    assert not (root / "exports").exists() or list((root / "exports").iterdir()) == []
    assert list(private_tmp.iterdir()) == []


def test_two_concurrent_analyses_export_once(tmp_path, rep):
    root = tmp_path / "store"
    outs = [tmp_path / f"c{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "traceview", "analyze", str(rep), "--store", str(root),
                               "-f", "json", "-o", str(o)], stderr=subprocess.PIPE, text=True) for o in outs]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert list((root / "exports").iterdir()) == [Store(root).export_path(rep)]
    assert Store(root).check() == []
