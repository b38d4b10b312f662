"""The command line's start (traceview/lean_imports.py, launch.main, runs.run_job): pyarrow and DuckDB
imported without cloudpickle, docscrape and importlib.metadata, DuckDB's version the one its
metadata gives, the modules left out still importable after, the garbage collector off while the
command starts and on again for the parse, and the Kineto helper's first batches handed over once
DuckDB's database is begun. Each case runs in a fresh interpreter: this process has all of these
modules imported already."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from helpers import TRACES

REAL = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"     # 22 MB of JSON: the helper is forked


def _run(code: str, *args, timeout: int = 180, env: dict | None = None) -> dict:
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_pyarrow_without_cloudpickle_and_docscrape_and_both_importable_after():
    got = _run("""
import json, sys
from traceview import lean_imports
lean_imports.pyarrow()
out = {"cloudpickle": "cloudpickle" in sys.modules, "docscrape": "pyarrow.vendored.docscrape" in sys.modules}
import pyarrow as pa, pyarrow.compute as pc
out["sum"] = pc.sum(pa.array([1, 2, 39])).as_py()
out["sorted"] = pc.sort_indices(pa.array([3, 1, 2])).to_pylist()
import pyarrow.vendored.docscrape as d
out["real_docscrape"] = hasattr(d.NumpyDocString, "_parse")
try:
    import cloudpickle
    out["cloudpickle_after"] = cloudpickle.dumps(lambda x: x + 1) is not None
except ImportError:
    out["cloudpickle_after"] = None
print(json.dumps(out))
""")
    assert got["cloudpickle"] is False and got["docscrape"] is False
    assert got["sum"] == 42 and got["sorted"] == [1, 2, 0]
    assert got["real_docscrape"] is True
    installed = importlib.util.find_spec("cloudpickle") is not None
    assert got["cloudpickle_after"] is (True if installed else None)


def test_duckdb_version_is_the_one_importlib_metadata_gives():
    got = _run("""
import json, sys
from traceview import lean_imports
lean_imports.duckdb()
import duckdb
out = {"metadata_loaded": "importlib.metadata" in sys.modules, "version": duckdb.__version__,
       "query": duckdb.sql("SELECT 6 * 7").fetchall()[0][0]}
import importlib.metadata as m
out["real"] = m.version("duckdb")
out["real_module"] = hasattr(m, "distributions") and type(m).__name__ == "module"
print(json.dumps(out))
""")
    assert got["metadata_loaded"] is False and got["query"] == 42
    assert got["version"] == got["real"] and got["real_module"]


def _package(site, name, versions):
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    for v in versions:
        info = site / f"{name}-{v}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {v}\n\nVersion: 9.9\n")


@pytest.mark.parametrize("versions, want", [(["1.2.3"], "1.2.3"), (["1.0", "2.0"], None), ([], None)])
def test_metadata_version_reads_the_one_dist_info_beside_the_package(tmp_path, monkeypatch, versions, want):
    from traceview import lean_imports
    name = "tv_lean_fake_pkg_" + "_".join(v.replace(".", "") for v in versions)
    _package(tmp_path, name, versions)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert lean_imports._metadata_version(name) == want
    assert lean_imports._metadata_version("tv_lean_no_such_package") is None


def test_the_stand_in_answers_its_versions_and_hands_the_rest_to_the_real_module():
    got = _run("""
import json, sys
from traceview import lean_imports
stand_in = lean_imports._StandIn({"somepkg": "7.1"})
sys.modules["importlib.metadata"] = stand_in
out = {"own": stand_in.version("somepkg")}
out["other"] = stand_in.version("pyarrow")            # from the real module
out["attr"] = callable(stand_in.distributions)
out["still_stand_in"] = sys.modules["importlib.metadata"] is stand_in
out["one_real"] = stand_in._real() is stand_in._real()
del sys.modules["importlib.metadata"]
import importlib.metadata as m
out["pyarrow"] = m.version("pyarrow")
print(json.dumps(out))
""")
    assert got["own"] == "7.1" and got["other"] == got["pyarrow"]
    assert got["attr"] and got["still_stand_in"] and got["one_real"]


_CLI = """
import gc, json, os, sys
from traceview.parsers import kineto_helper
kineto_helper._cores = lambda: 2                      # a busy test machine still forks the helper
kineto_helper._idle_core = lambda cores: True
events = []
sys.argv = ["traceview", "analyze", *sys.argv[1:]]
from traceview import launch
_main = launch.main
def main():
    from traceview import runs
    job, load = runs.run_job, runs._load
    from traceview import lean_imports
    lean = lean_imports.duckdb
    def lean_duckdb():                                # DuckDB imported as the command does, then watched
        lean()
        from traceview import duck
        begin = duck.begin
        duck.begin = lambda: (events.append(["begin", gc.isenabled()]), begin())[1]
    lean_imports.duckdb = lean_duckdb
    def run_job(*a, **k):
        events.append(["run_job", gc.isenabled()])
        from traceview.parsers import kineto
        prime = kineto.prime
        def priming(path, *a, **k):
            got = prime(path, *a, **k)
            events.append(["prime", got, gc.isenabled()])
            return got
        kineto.prime = priming
        return job(*a, **k)
    def loading(*a, **k):
        events.append(["load", gc.isenabled()])
        return load(*a, **k)
    runs.run_job, runs._load = run_job, loading
    _main()
def done(code):
    print(json.dumps({"rc": code, "events": events, "gc": gc.isenabled(),
                      "modules": [m for m in ("cloudpickle", "pyarrow.vendored.docscrape", "importlib.metadata")
                                  if m in sys.modules]}))
    sys.stdout.flush()
    os._exit(code)
launch.exit_now = done
main()
"""


def test_the_command_starts_without_the_collector_and_primes_once_the_database_is_begun(tmp_path):
    got = _run(_CLI, REAL, "-f", "json", "-o", tmp_path / "a.json", "--no-store")
    assert got["rc"] == 0
    # the collector off from the start to the parse; the helper primed after DuckDB's database is
    # begun (its thread makes the database while the batches are cut), before the parse
    assert got["events"] == [["run_job", False], ["begin", False], ["prime", True, False], ["load", True]]
    assert got["gc"] is True
    assert got["modules"] == [], "the command line imported what lean_imports leaves out"
    p = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(REAL), "-f", "json", "-o",
                        str(tmp_path / "b.json"), "--no-store"], capture_output=True, text=True, timeout=180,
                       env={**__import__("os").environ, "TRACEVIEW_PARSE_HELPER": "0"})
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


_STORED = """
import gc, json, os, sys
sys.argv = ["traceview", "analyze", *sys.argv[1:]]
from traceview import analyze_cli, launch, runs
seen = {}
write = analyze_cli.write_output
def writing(text, out):
    seen["collects"] = gc.isenabled()
    return write(text, out)
analyze_cli.write_output = writing
job = runs.run_job
runs.run_job = lambda *a, **k: (seen.setdefault("ran", True), job(*a, **k))[1]
def done(code):
    print(json.dumps({"rc": code, **seen}))
    sys.stdout.flush()
    os._exit(code)
launch.exit_now = done
launch.main()
"""


def test_the_collector_is_on_for_the_output_of_a_job_the_store_kept(tmp_path):
    store = tmp_path / "store"
    first = _run(_STORED, REAL, "-f", "json", "-o", tmp_path / "a.json", "--store", store)
    assert first == {"rc": 0, "collects": True, "ran": True}
    # another format of the same job: its document from the store, no run
    again = _run(_STORED, REAL, "-f", "markdown", "-o", tmp_path / "b.md", "--store", store)
    assert again == {"rc": 0, "collects": True}


def test_pandas_marked_absent_without_pyarrow_pandas_compat(tmp_path):
    """The command line's process never imports pandas (a stand-in package that records its import
    stands where pandas would be), nor pyarrow's pandas_compat for the probe; pyarrow's conversions
    of Python values go on without it."""
    fake = tmp_path / "pandas"
    fake.mkdir()
    marker = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n__version__ = '9.9.9'\n")
    got = _run(f"""
import json, sys
sys.path.insert(0, {str(tmp_path)!r})
from traceview.cli_common import skip_pyarrow_pandas_probe
skip_pyarrow_pandas_probe()
import pyarrow as pa
out = {{"compat": "pyarrow.pandas_compat" in sys.modules, "have": pa.lib._pandas_api.have_pandas,
       "rows": pa.Table.from_pylist([{{"a": 1}}, {{"a": 41}}]).column("a").to_pylist(),
       "sum": sum(pa.array([1, 2, 39]).to_pylist())}}
try:
    import pandas
    out["after"] = "imported"
except ImportError:
    out["after"] = "absent"
print(json.dumps(out))
""")
    assert got == {"compat": False, "have": False, "rows": [1, 41], "sum": 42, "after": "absent"}
    assert not marker.exists()


# what a run of one trace without a config or budget file, a pool or an error never uses: imported
# where they are (config.read_toml, executors' pools, engine.steps.sql_files off a folder on disk,
# cli_common's --debug traceback), 3-5 ms of the start each (docs/SPEED.md, "eighth session").
# Only what the run imports counts: the interpreter's start may have imported some already (a .pth
# file in site-packages, as the CI machine's Python has one that imports certifi, and with it
# importlib.resources and zipfile).
_NOT_IMPORTED = ("tomllib", "concurrent.futures", "logging", "importlib.resources", "zipfile", "traceback")

_MODULES = f"""
import json, os, sys
at_start = set(sys.modules)
sys.argv = ["traceview", "analyze", *sys.argv[1:]]
from traceview import launch
def done(code):
    print(json.dumps({{"rc": code, "modules": sorted(m for m in {_NOT_IMPORTED!r}
                                                     if m in sys.modules and m not in at_start)}}))
    sys.stdout.flush()
    os._exit(code)
launch.exit_now = done
launch.main()
"""


def test_a_run_of_one_trace_imports_none_of_what_it_does_not_use(tmp_path):
    got = _run(_MODULES, REAL, "-f", "json", "-o", tmp_path / "a.json", "--no-store")
    assert got == {"rc": 0, "modules": []}


def test_the_sql_files_read_off_the_folder_are_those_importlib_resources_gives():
    from importlib import resources

    from traceview.engine.steps import sql_files
    for sub in (None, "intervals"):
        folder = resources.files("traceview.sql")
        want = {f.name: f.read_text() for f in (folder.joinpath(sub) if sub else folder).iterdir()
                if f.name.endswith(".sql")}
        got = {f.name: f.read_text(encoding="utf-8") for f in sql_files(sub) if f.name.endswith(".sql")}
        assert got == want and len(want) >= (1 if sub else 30)


# DuckDB's relational API (duckdb/_relation.py, DuckDB 2) left out of the command line until used
_LAZY = """
import json, sys, threading
from traceview import lean_imports
lean_imports.duckdb()
import duckdb
out = {"stand_in": type(sys.modules["duckdb._relation"]).__name__}
con = duckdb.connect()
out["execute"] = con.execute("SELECT 40 + 2").fetchall()[0][0]
from traceview import duck
out["table"] = duck.arrow_table(con, "SELECT 7 AS x").to_pydict()
out["reader"] = [b.num_rows for b in duck.query_reader(con, "SELECT range AS i FROM range(10)", 4)]
out["still_stand_in"] = type(sys.modules["duckdb._relation"]).__name__
first = sys.argv[1]
if first == "module":
    out["first"] = duckdb.sql("SELECT 6 * 7").fetchall()[0][0]
elif first == "method":
    out["first"] = con.sql("SELECT 6 * 7").fetchall()[0][0]
else:                                   # the connection's method on several threads at once
    got = []
    threads = [threading.Thread(target=lambda: got.append(duckdb.connect().sql("SELECT 6 * 7").fetchall()[0][0]))
               for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    out["first"] = got
real = sys.modules["duckdb._relation"]
out["real"] = type(real).__name__ == "module" and hasattr(real, "module_sql")
out["package_attr"] = duckdb._relation is real
out["relation_class"] = duckdb.DuckDBPyRelation is real.DuckDBPyRelation
out["instance"] = isinstance(con.sql("SELECT 1"), duckdb.DuckDBPyRelation)
out["methods"] = all(getattr(duckdb.DuckDBPyConnection, n) is m for n, m in real.CONNECTION_METHODS.items())
out["functions"] = {n: getattr(duckdb, n) is getattr(real, f.__name__)
                    for n, f in vars(duckdb).items() if getattr(f, "__module__", None) == "duckdb._relation"
                    and callable(f) and not isinstance(f, type)}
out["forwarders_left"] = sorted(n for n, f in vars(duckdb).items()
                                if getattr(f, "__module__", None) == "traceview.lean_imports")
print(json.dumps(out))
"""


@pytest.mark.parametrize("first", ["module", "method", "threads"])
def test_duckdbs_relational_api_is_left_out_until_it_is_used_then_is_the_real_one(first):
    got = _run(_LAZY, first)
    assert got["stand_in"] == got["still_stand_in"] == "_LazyRelation"
    assert got["execute"] == 42 and got["table"] == {"x": [7]} and got["reader"] == [4, 4, 2]
    assert got["first"] == ([42] * 4 if first == "threads" else 42)
    assert got["real"] and got["package_attr"] and got["relation_class"] and got["instance"] and got["methods"]
    # every function of the package that the relational module defines is that module's own again
    assert got["functions"] and all(got["functions"].values()), got["functions"]
    assert got["forwarders_left"] == []


_NAMES = """
import json, sys
if sys.argv[1] == "lean":
    from traceview import lean_imports
    lean_imports.duckdb()
import duckdb
duckdb.sql("SELECT 1")                  # (the stand-in's place taken by the real module)
print(json.dumps({"package": sorted(vars(duckdb)), "connection": sorted(dir(duckdb.DuckDBPyConnection))}))
"""


def test_the_package_has_the_same_names_with_the_relational_api_left_out_then_used():
    assert _run(_NAMES, "lean") == _run(_NAMES, "plain")


def test_the_connection_methods_read_off_the_source_are_the_modules_own():
    rel = pytest.importorskip("duckdb._relation")
    if not hasattr(rel, "CONNECTION_METHODS"):
        pytest.skip("no relational module in Python in this DuckDB")
    from traceview import lean_imports
    got = lean_imports.relation_methods(lean_imports._package_dir("duckdb"))
    assert got == tuple(rel.CONNECTION_METHODS) and "sql" in got


@pytest.mark.parametrize("text, want", [
    ('x = 1\nCONNECTION_METHODS: dict[str, Any] = {\n    "sql": _connection_sql,\n    "read_csv": _f,\n}\n',
     ("sql", "read_csv")),
    ('CONNECTION_METHODS = {\n    "sql": _connection_sql,\n    **OTHER,\n}\n', None),   # a line not read
    ('CONNECTION_METHODS = {"sql": _connection_sql}\n', None),                          # not one a line
    ("def f():\n    pass\n", None),
])
def test_the_connection_methods_are_read_only_from_a_table_read_whole(tmp_path, text, want):
    from traceview import lean_imports
    (tmp_path / "_relation.py").write_text(text)
    assert lean_imports.relation_methods(tmp_path) == want
    assert lean_imports.relation_methods(tmp_path / "missing") is None
    assert lean_imports.relation_methods(None) is None


_RUN_RELATION = """
import json, os, sys
sys.argv = ["traceview", "analyze", *sys.argv[1:]]
from traceview import launch
def done(code):
    m = sys.modules.get("duckdb._relation")
    print(json.dumps({"rc": code, "relation": type(m).__name__ if m is not None else None}))
    sys.stdout.flush()
    os._exit(code)
launch.exit_now = done
launch.main()
"""


def test_a_run_of_one_trace_never_imports_the_relational_api(tmp_path):
    # as a user runs it: without the test suite's check of every step's columns (TRACEVIEW_CHECK_STEPS,
    # conftest.py), which reads them through the relational API (engine/session.py `columns`)
    env = {k: v for k, v in os.environ.items() if k != "TRACEVIEW_CHECK_STEPS"}
    got = _run(_RUN_RELATION, REAL, "-f", "json", "-o", tmp_path / "a.json", "--no-store", env=env)
    assert got == {"rc": 0, "relation": "_LazyRelation"}
    # the run that checks them imports it, and gives the same report
    checked = _run(_RUN_RELATION, REAL, "-f", "json", "-o", tmp_path / "b.json", "--no-store")
    assert checked == {"rc": 0, "relation": "module"}
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
