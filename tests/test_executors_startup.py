"""A mapped job's start-up: the workers' forkserver imports what the workers run once (they import
nothing per task), the options are still checked before any input is read, the bench's task
timing is printed only when asked, and the stalls parts' strings are shared without changing them."""
import importlib
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from traceview import executors, mapped, runs
from traceview.errors import UsageError
from traceview.runs import AnalyzeOptions


def _loaded(names):
    return sorted(n for n in names if n in sys.modules)


@pytest.mark.parametrize("names", [executors.WORKER_MODULES, runs.ANALYSIS_MODULES])
def test_every_preloaded_module_exists(names):
    # the forkserver skips a preload module that does not import: a misspelt one would be silently
    # imported again in every worker
    for name in names:
        assert importlib.import_module(name).__name__ == name


def test_pool_workers_start_with_what_the_tasks_import():
    with ProcessPoolExecutor(max_workers=1, mp_context=executors._context()) as pool:
        have = pool.submit(_loaded, ["duckdb", "traceview.engine.session", "traceview.analysis.stalls",
                                     "traceview.flops.steps", "traceview.analysis.breakdown"]).result()
    assert have == sorted(["duckdb", "traceview.engine.session", "traceview.analysis.stalls",
                           "traceview.flops.steps", "traceview.analysis.breakdown"])


def test_warm_starts_nothing_without_a_pool(monkeypatch):
    started = []
    from multiprocessing import forkserver
    monkeypatch.setattr(forkserver, "ensure_running", lambda: started.append(1))
    executors.warm()                                     # no run configured
    with executors.configured(executors.RunSettings(jobs=1)):
        executors.warm()
    assert started == []
    with executors.configured(executors.RunSettings(jobs=2)):
        executors.warm()
    assert started == [1]


def test_options_are_checked_before_a_missing_input_is_said(tmp_path):
    missing = str(tmp_path / "no-such-trace.json")
    with executors.configured(executors.RunSettings(jobs=2)):
        with pytest.raises(UsageError):
            runs.run_job([missing, missing], AnalyzeOptions(step_regex="(unclosed"))


def test_timed_prints_only_under_the_bench(monkeypatch, capsys):
    monkeypatch.delenv("TRACEVIEW_BENCH_STATS", raising=False)
    assert executors._task(len, ("abc",)) == (len, "abc")
    monkeypatch.setenv("TRACEVIEW_BENCH_STATS", "1")
    fn, *args = executors._task(len, ("abc",))
    assert fn(*args) == 3
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"TRACEVIEW_TASK len pid {os.getpid()} cpu ")


def test_shared_strings_are_one_object_and_the_same_values():
    a, b = "".join(["ker", "nel"]), "".join(["kern", "el"])
    assert a is not b
    part = {"rows": [{"name": a, "ns": 1, "f": 0.5, "none": None, "t": ("x", 2)},
                     {"name": b, "ns": 2, "ev": [{"name": "".join(["ker", "nel"])}]}],
            "names": ["".join(["ker", "nel"]), 3]}
    got = mapped._share_strings(part, {})
    assert got == part
    rows = got["rows"]
    assert rows[0]["name"] is rows[1]["name"] is rows[1]["ev"][0]["name"] is got["names"][0]
    assert rows[0]["t"] is part["rows"][0]["t"]          # a tuple is kept as it is


def _dateutil_state():
    import importlib.util
    installed = sys.modules.get("dateutil") is not None or (
        "dateutil" not in sys.modules and importlib.util.find_spec("dateutil") is not None)
    return "dateutil" in sys.modules and sys.modules["dateutil"] is None, installed


def test_pool_workers_look_for_a_missing_dateutil_once():
    with ProcessPoolExecutor(max_workers=1, mp_context=executors._context(),
                             initializer=executors.worker_init) as pool:
        marked, installed = pool.submit(_dateutil_state).result()
    assert marked != installed          # marked absent exactly when it is not installed
    if not installed:
        with ProcessPoolExecutor(max_workers=1, mp_context=executors._context(),
                                 initializer=executors.worker_init) as pool:
            with pytest.raises(ModuleNotFoundError):
                pool.submit(importlib.import_module, "dateutil").result()



# start_pool forks only from a process without threads of its own: this test process has run DuckDB
# (its threads stay), so each case runs in a fresh interpreter
_FORKED = """
import json, multiprocessing as mp, os, sys
from traceview import launch
launch.one_blas_thread()            # as the command does first (numpy's OpenBLAS would start threads)
from traceview import executors
def view(names):
    import gc
    from traceview import mapped
    return sorted(n for n in names if n in sys.modules), executors.current() is None, \\
        mp.parent_process() is not None, os.getppid(), len(mapped._SPARE), gc.isenabled()
jobs, files = int(sys.argv[1]), int(sys.argv[2])
import gc
gc.disable()                         # as the command line is while it starts (launch.main)
out = {"safe": executors._fork_safe()}
from traceview import mapped
with executors.configured(executors.RunSettings(jobs=jobs)) as state:
    executors.start_pool(files, mapped.open_spare)
    pool = state.pool
    out["pool"] = pool is not None
    if pool is not None:
        out["method"] = pool._mp_context.get_start_method()
        out["processes"] = len(pool._processes)
        loaded, no_run, has_parent, ppid, spare, collects = pool.submit(view, sys.argv[3:]).result()
        out.update(loaded=loaded, no_run=no_run, has_parent=has_parent, my_child=ppid == os.getpid(), spare=spare,
                   collects=collects)
print(json.dumps(out))
"""


def _forked(jobs: int, files: int, names: list[str]) -> dict:
    import json
    import subprocess
    p = subprocess.run([sys.executable, "-c", _FORKED, str(jobs), str(files), *names],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_start_pool_forks_the_workers_with_what_they_run_imported():
    names = ["duckdb", "traceview.engine.session", "traceview.analysis.stalls", "traceview.parsers.kineto"]
    got = _forked(2, 5, names)
    assert got["safe"] and got["pool"] and got["method"] == "fork"
    assert got["processes"] == 2                    # forked at once: min(--jobs, files)
    assert got["loaded"] == sorted(names)           # imported before the fork, not by the worker
    assert got["no_run"] and got["has_parent"] and got["my_child"]   # this process's child, no forkserver
    assert got["spare"] == 1                        # its first batch's session, opened as it started
    assert got["collects"] is True                  # its garbage collector on, the parent's off


def test_a_batch_takes_the_session_opened_ahead_then_opens_its_own():
    from traceview import schema
    from traceview.profile import Profile
    assert mapped._SPARE == []
    mapped.open_spare()
    ahead = mapped._SPARE[0]
    prof = Profile(**{name: schema.empty(name) for name in schema.TABLES}, warnings=[])
    first, second = mapped._session_over(prof), mapped._session_over(prof)
    assert first is ahead and first.profile is prof and mapped._SPARE == []
    assert second is not ahead and second.profile is prof
    assert first.rows("SELECT count(*) AS n FROM gpu_activities") == [{"n": 0}]
    first.close()
    second.close()


def test_start_pool_forks_one_worker_for_one_file_and_none_without_a_pool():
    assert _forked(4, 1, [])["processes"] == 1
    assert _forked(1, 8, []) == {"safe": True, "pool": False}


def test_start_pool_does_not_fork_while_another_thread_runs(monkeypatch):
    import threading
    started = []
    monkeypatch.setattr(executors, "warm", lambda: started.append(1))
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="other")
    t.start()
    try:
        assert not executors._fork_safe()
        with executors.configured(executors.RunSettings(jobs=2)) as state:
            executors.start_pool(files=4)
            assert state.pool is None and started == [1]    # the forkserver's pool, made with the first tasks
    finally:
        stop.set()
        t.join()


def test_arrow_tables_travel_through_the_pool_as_ipc(monkeypatch):
    """executors.tables_as_ipc: a table the pool sends (a rank's meta, a batch's meta, a stall
    part's keys) comes back equal with its schema's metadata, its chunks and their dictionaries,
    empty or not; a table IPC cannot write is pickled as before."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import pyarrow as pa

    from traceview import schema
    executors.tables_as_ipc()
    odd = pa.table({"d": pa.chunked_array([pa.array(["x", "y"]).dictionary_encode(),
                                           pa.array(["z", "x"]).dictionary_encode()]),
                    "l": pa.chunked_array([pa.array([[1], None]), pa.array([[2, 3], []])])},
                   metadata={b"k": b"v"})
    uneven = pa.table({"a": pa.chunked_array([[1, 2], [3]]), "b": pa.chunked_array([[4], [5, 6]])})
    for t, ipc in ((odd, True), (odd.slice(1, 2), True), (schema.empty("meta"), False), (uneven, False)):
        back = pickle.loads(bytes(ForkingPickler.dumps(t)))
        assert back.equals(t) and back.schema.equals(t.schema, check_metadata=True)
        assert [[len(c) for c in col.chunks] for col in back.columns] == \
            [[len(c) for c in col.chunks] for col in t.columns]
        assert (executors._table_reduce(t)[0] is executors._table_from_ipc) is ipc
    monkeypatch.setattr(pa.ipc, "new_stream", lambda *a, **k: (_ for _ in ()).throw(pa.ArrowInvalid("no")))
    fn, args = executors._table_reduce(odd)[:2]
    assert fn is not executors._table_from_ipc and fn(*args).equals(odd)


_CLI_PROCESS = """
import importlib.util, json, sys
from traceview import cli_common, runs
installed = importlib.util.find_spec("dateutil") is not None
runs._cli_process()                        # a library user's process: left alone
untouched = "dateutil" not in sys.modules or sys.modules["dateutil"] is not None
cli_common.IN_CLI = True
runs._cli_process()                        # the command line's own process
marked = "dateutil" in sys.modules and sys.modules["dateutil"] is None
print(json.dumps([installed, untouched, marked]))
"""


def test_the_command_lines_own_process_looks_for_a_missing_dateutil_once():
    """As in the pool's workers: the command line's process marks a python-dateutil that is not
    installed absent before it parses (pyarrow searched sys.path for it 19 times a rank), and only
    where it is not installed; a library user's sys.modules is left alone."""
    import json
    import subprocess
    out = subprocess.run([sys.executable, "-c", _CLI_PROCESS], capture_output=True, text=True, check=True)
    installed, untouched, marked = json.loads(out.stdout)
    assert untouched and marked != installed
