"""One `analyze` builds each step once and opens one DuckDB connection onto one database (the
CLI's path: options checked, rules loaded, trace loaded, every section, on h200_moe/overlap and the
8-rank DLRM job; an nsys export adds the parser's connection onto the same database)."""
import inspect
import sqlite3
import threading

import duckdb
import pytest
from helpers import TRACES

from traceview import duck
from traceview.engine import steps
from traceview.errors import TraceError
from traceview.parsers import nsys
from traceview.runs import AnalyzeOptions, run_job

CASES = {"h200_moe_overlap": [TRACES / "kineto" / "h200_moe" / "overlap.json.gz"],
         "dlrm_8rank": sorted((TRACES / "kineto" / "dlrm_8rank_v100").glob("*.json*"))}


def _counted(monkeypatch) -> tuple[list, list]:
    """The databases (duckdb.connect) and the connections onto the thread's one (duck.connect)
    opened from now on, by the file that opened each; the thread's database made afresh."""
    opened, connections = [], []
    real, real_cursor = duckdb.connect, duck.connect

    def counting(*a, **k):
        opened.append(inspect.stack()[1].filename)
        return real(*a, **k)

    def counting_cursor():
        connections.append(inspect.stack()[1].filename)
        return real_cursor()
    monkeypatch.setattr(duckdb, "connect", counting)
    monkeypatch.setattr(duck, "connect", counting_cursor)
    monkeypatch.setattr(duck, "_local", threading.local())
    return opened, connections


def test_an_nsys_export_one_database(monkeypatch):
    path = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
    if not path.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    opened, connections = _counted(monkeypatch)
    monkeypatch.setattr(nsys, "PARALLEL_MIN_BYTES", 0)    # parsed as a large export: on every core
    doc, session = run_job([str(path)], AnalyzeOptions())
    assert doc["steps"]
    assert len(opened) == 1, opened                # the parser's connection is onto the session's database
    # the session's, the parser's, and the one the parser gives the threads back on
    assert [c.rsplit("/", 2)[-2:] for c in connections] == [["engine", "session.py"]] + [["parsers", "nsys.py"]] * 2
    # the session's single thread is back once the parse is done (a machine of one core cannot tell)
    assert session.con.execute("SELECT current_setting('threads')").fetchone()[0] == 1


def test_a_failed_parse_gives_the_threads_back(monkeypatch, tmp_path):
    # an SQLite file with only StringIds: the parse fails inside the reader (no kernel records)
    db = tmp_path / "no_kernels.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    monkeypatch.setattr(duck, "_local", threading.local())
    monkeypatch.setattr(nsys, "PARALLEL_MIN_BYTES", 0)
    mine = duck.connect()
    mine.execute("SET threads = 1")
    with pytest.raises(TraceError, match="no CUDA kernel records"):
        nsys.read(db)
    assert mine.execute("SELECT current_setting('threads')").fetchone()[0] == 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_step_once_and_one_connection(case, monkeypatch):
    paths = CASES[case]
    if not paths or not all(p.exists() for p in paths):
        pytest.skip("the shared corpus is not beside the checkout")
    opened, connections = _counted(monkeypatch)
    doc, session = run_job([str(p) for p in paths], AnalyzeOptions())
    assert len(opened) == 1, opened               # one database ...
    assert len(connections) == 1, connections     # ... and one connection onto it: the session's
    assert doc["steps"] and doc["critical_path"]
    assert session.build_counts and set(session.build_counts.values()) == {1}, session.build_counts
    # what the report reads was built through the engine, each step once
    want = {"activity_origin", "activity_class", "step_source", "step_ranges", "windows", "segments",
            "activity_spans", "breakdown", "top_kernels", "range_context_raw", "layer_heads", "layer_blocks",
            "range_context", "activity_attribution", "activity_shares", "layer_times", "attribution_groups",
            "comm_ops", "comm_exposure", "comm_summary", "coll_instances", "cp_host_syncs"}
    assert want <= set(session.build_counts), want - set(session.build_counts)
    # cp_preds' SQL runs per chunk of ranks (critical_path.iter_paths): never materialized for all
    assert "cp_preds" not in session.build_counts
    assert set(session.build_counts) <= set(steps.all_steps())
