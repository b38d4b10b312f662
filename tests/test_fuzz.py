"""A property-based fuzzer over real corpus traces of both formats.

Each example takes a small real trace (Kineto JSON, gzip or not; an nsys SQLite export), mutates
it (structure, types, values, names with control characters or huge strings, compression: cut or
multi-member gzip, truncated files) and runs `traceview analyze FILE -f json -o OUT` in-process
(the same `run_cli` that the `traceview` entry point exits with). The promise, on every example:
exit 0 with a report at OUT that validates against the schema, or exit 2 with exactly one line on
stderr that names the file, and nothing at OUT.

Fixed seed (derandomize), no example database; about two minutes in all on the CI machine.
TRACEVIEW_FUZZ_EXAMPLES=N runs N examples per format instead.

The input-side defects the fuzzer first found (deep JSON nesting, flow ids of the wrong type, nsys NULL
or renamed columns, nsys timestamps at the int64 limits) are fixed; each keeps a regression case below,
and no internal error is tolerated any more (`KNOWN_INPUT` is empty).
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import ROOT, TRACES
from reports_support import GEN, validate

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from traceview.cli import run_cli  # noqa: E402

EXAMPLES = int(os.environ.get("TRACEVIEW_FUZZ_EXAMPLES", "0") or 0)
KINETO_SEEDS = [GEN / "tiny_breakdown.json", GEN / "control_names.json",
                TRACES / "kineto" / "hta_trace_compare_base" / "base.json.gz",
                TRACES / "kineto" / "hta_triton_example" / "triton_example.json.gz",
                TRACES / "kineto" / "hta_cuda_event_sync" / "event_sync_trace.json.gz",
                TRACES / "kineto" / "tracelens_moe_b300" / "moe_01_many_experts_few_tokens.json.gz",
                TRACES / "kineto" / "hta_amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
NSYS_SEEDS = [GEN / "tiny_breakdown.sqlite", GEN / "control_names.sqlite", GEN / "hostile_names.sqlite"]
HOSTILE_STRINGS = ["\x1b[2J\x1b]8;;http://x.invalid/\x07x\x1b]8;;\x07", "a\r\nb\x00c\x7f\x9b1m", "",
                   "x" * 200_000, "\u202e\u2028\ud7ff\U0001f600", "</script><script>alert(1)</script>",
                   "layer_01/moe/dispatch", "ProfilerStep#1", "nccl:all_to_all"]
ODD_VALUES = [None, True, -1, 0, 2 ** 63 - 1, 2 ** 63, -(2 ** 63), 2 ** 70, 1e300, -1e300, 0.5, "abc", "12",
              [], [1, 2], {}, {"a": 1}]
_cache: dict[str, object] = {}


def _h200_cut() -> Path:
    """The bundled H200 trace cut down to its first 1500 events (a valid, small Kineto file)."""
    p = Path(tempfile.gettempdir()) / f"traceview-fuzz-{os.getpid()}-h200-cut.json"
    if not p.exists():
        doc = json.loads(gzip.decompress((ROOT / "fixtures" / "h200_moe_overlap.json.gz").read_bytes()))
        doc["traceEvents"] = doc["traceEvents"][:1500]
        p.write_text(json.dumps(doc))
    return p


def kineto_doc(seed: Path) -> dict:
    key = str(seed)
    if key not in _cache:
        raw = seed.read_bytes()
        _cache[key] = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return json.loads(json.dumps(_cache[key]))           # a fresh copy


# --- running one example --------------------------------------------------------------------------

def run(path: Path, out: Path) -> tuple[int, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = run_cli(["analyze", str(path), "-f", "json", "-o", str(out)])
    return code, stderr.getvalue()


KNOWN_INPUT: dict[str, tuple[str, ...]] = {}   # mutation kind -> words of a tolerated internal error: none
known_seen: list[str] = []


def known_input_defect(kind: str, code: int, err: str) -> bool:
    return code == 3 and any(w in err for w in KNOWN_INPUT.get(kind, ()))


def check_promise(path: Path, out: Path, kind: str) -> None:
    code, err = run(path, out)
    if known_input_defect(kind, code, err):
        known_seen.append(f"{kind}: {err.strip()[:160]}")
        assert not out.exists()
        return
    if code == 0:
        assert out.exists(), "exit 0 without a report"
        validate(json.loads(out.read_text(encoding="utf-8")))
        return
    assert code == 2, f"{kind}: exit {code}: {err[:500]}"
    lines = err.split("\n")
    assert len(lines) == 2 and lines[1] == "" and lines[0].startswith("traceview: "), f"{kind}: {err[:500]!r}"
    assert path.name in lines[0], f"{kind}: the error does not name the file: {lines[0][:300]!r}"
    assert not out.exists(), f"{kind}: exit 2 but {out.name} was written"


# --- Kineto mutations ----------------------------------------------------------------------------

def _events(doc) -> list:
    ev = doc.get("traceEvents") if isinstance(doc, dict) else None
    return ev if isinstance(ev, list) and ev else []


def mutate_kineto(data, doc: dict) -> tuple[str, object]:
    """(kind, mutated document or raw bytes)."""
    kind = data.draw(st.sampled_from(["field_type", "field_value", "drop_field", "name", "drop_events",
                                      "duplicate_events", "top_level", "flow_id_type", "shallow_nesting",
                                      "deep_nesting", "bytes_cut", "bytes_flip", "none"]), label="kineto mutation")
    ev = _events(doc)
    pick = lambda: ev[data.draw(st.integers(0, len(ev) - 1), label="event")] if ev else {}  # noqa: E731
    if kind in ("field_type", "field_value", "drop_field"):
        for _ in range(data.draw(st.integers(1, 5), label="how many")):
            e = pick()
            if not isinstance(e, dict) or not e:
                continue
            key = data.draw(st.sampled_from(sorted(set(e) | {"ts", "dur", "name", "args", "ph", "cat"})), label="field")
            if kind == "drop_field":
                e.pop(key, None)
            elif kind == "field_type":
                e[key] = data.draw(st.sampled_from(ODD_VALUES), label="value")
            else:
                base = e.get(key) if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool) else 0
                e[key] = data.draw(st.sampled_from([base * 1000, -base, base + 1e12, base / 1e6, 1e18, -1e18]))
    elif kind == "name":
        for _ in range(data.draw(st.integers(1, 8), label="how many")):
            e = pick()
            if isinstance(e, dict):
                e["name"] = data.draw(st.sampled_from(HOSTILE_STRINGS), label="name")
                if isinstance(e.get("args"), dict) and data.draw(st.booleans()):
                    e["args"]["stream"] = data.draw(st.sampled_from(HOSTILE_STRINGS + [7, -1]))
    elif kind == "drop_events":
        if ev:
            i = data.draw(st.integers(0, len(ev) - 1))
            j = data.draw(st.integers(i, len(ev)))
            del ev[i:j]
    elif kind == "duplicate_events":
        if ev:
            i = data.draw(st.integers(0, len(ev) - 1))
            ev.extend(json.loads(json.dumps(ev[i:i + data.draw(st.integers(1, 50))])))
    elif kind == "top_level":
        choice = data.draw(st.sampled_from(["list", "string", "events_dict", "no_events", "extra_keys"]))
        if choice == "list":
            return kind, ev
        if choice == "string":
            return kind, "trace"
        if choice == "events_dict":
            doc["traceEvents"] = {"0": ev[:1]}
        elif choice == "no_events":
            doc.pop("traceEvents", None)
        else:
            doc["deviceProperties"] = data.draw(st.sampled_from(ODD_VALUES))
            doc["distributedInfo"] = data.draw(st.sampled_from(ODD_VALUES))
    elif kind == "flow_id_type":
        flows = [e for e in ev if isinstance(e, dict) and e.get("ph") in ("s", "f")]
        for e in flows[: data.draw(st.integers(1, 5))]:
            e["id"] = data.draw(st.sampled_from([[1], {"x": 1}, "abc", 1.5, None, 2 ** 70]))
    elif kind == "shallow_nesting":
        e = pick()
        if isinstance(e, dict):
            nest: object = 1
            for _ in range(data.draw(st.integers(1, 60))):
                nest = [nest]
            e.setdefault("args", {})
            if isinstance(e["args"], dict):
                e["args"]["deep"] = nest
    elif kind == "deep_nesting":
        depth = data.draw(st.sampled_from([2_000, 100_000]))
        text = json.dumps(doc)
        return kind, text[:-1] + ', "skipped": ' + "[" * depth + "]" * depth + "}"
    elif kind in ("bytes_cut", "bytes_flip"):
        raw = json.dumps(doc).encode()
        if kind == "bytes_cut":
            return kind, raw[: data.draw(st.integers(0, len(raw) - 1))]
        raw = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 10))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        return kind, bytes(raw)
    return kind, doc


def compress(data, raw: bytes) -> tuple[str, bytes]:
    how = data.draw(st.sampled_from(["plain", "plain", "gzip", "gzip_cut", "gzip_multi", "gzip_trailing"]),
                    label="compression")
    if how == "plain":
        return ".json", raw
    if how == "gzip":
        return ".json.gz", gzip.compress(raw, mtime=0)
    if how == "gzip_cut":
        z = gzip.compress(raw, mtime=0)
        return ".json.gz", z[: data.draw(st.integers(0, len(z) - 1))]
    if how == "gzip_multi":              # valid: concatenated members inflate to the whole
        k = data.draw(st.integers(0, len(raw)))
        return ".json.gz", gzip.compress(raw[:k], mtime=0) + gzip.compress(raw[k:], mtime=0)
    return ".json.gz", gzip.compress(raw, mtime=0) + data.draw(st.sampled_from([b"\x00" * 8, b"garbage", b"\x1f\x8b"]))


def budget(default: int) -> int:
    return EXAMPLES or default


COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def work():
    d = Path(tempfile.mkdtemp(prefix="traceview-fuzz-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)
    if os.environ.get("TRACEVIEW_FUZZ_KNOWN"):     # where to list the known input-side cases met
        Path(os.environ["TRACEVIEW_FUZZ_KNOWN"]).write_text("\n".join(known_seen) + "\n")
    p = Path(tempfile.gettempdir()) / f"traceview-fuzz-{os.getpid()}-h200-cut.json"
    p.unlink(missing_ok=True)


_counter = [0]


def fresh(work: Path) -> Path:
    _counter[0] += 1
    d = work / f"ex{_counter[0]}"
    d.mkdir()
    return d


@settings(max_examples=budget(45), **COMMON)
@given(data=st.data())
def test_fuzz_kineto(work, data):
    seeds = [s for s in KINETO_SEEDS if s.exists()] + [_h200_cut()]
    seed = data.draw(st.sampled_from(seeds), label="seed")
    kind, mutated = mutate_kineto(data, kineto_doc(seed))
    raw = mutated if isinstance(mutated, bytes) else (
        mutated.encode() if isinstance(mutated, str) and kind == "deep_nesting" else json.dumps(mutated).encode())
    suffix, raw = compress(data, raw)
    d = fresh(work)
    path = d / f"trace{suffix}"
    path.write_bytes(raw)
    check_promise(path, d / "out.json", kind)
    shutil.rmtree(d)


# --- nsys SQLite mutations -----------------------------------------------------------------------

NSYS_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds",
               "CUPTI_ACTIVITY_KIND_MEMCPY", "TARGET_INFO_GPU"]


def relax(con, table: str) -> None:
    """The table rebuilt without its NOT NULL/CHECK constraints (an export written by other tools
    may hold what the generated fixture's schema forbids)."""
    con.execute(f'CREATE TABLE "{table}__relaxed" AS SELECT * FROM "{table}"')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE "{table}__relaxed" RENAME TO "{table}"')


def _columns(con, table) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def mutate_nsys(data, path: Path) -> str:
    kind = data.draw(st.sampled_from(["nsys_value", "nsys_null", "nsys_int64", "nsys_name", "nsys_delete_rows",
                                      "nsys_drop_table", "nsys_rename_column", "nsys_text_number",
                                      "bytes_cut", "none"]), label="nsys mutation")
    if kind == "bytes_cut":
        raw = path.read_bytes()
        path.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1))])
        return kind
    if kind == "none":
        return kind
    con = sqlite3.connect(path)
    try:
        tables = [t for t in NSYS_TABLES
                  if con.execute("select count(*) from sqlite_master where name=?", (t,)).fetchone()[0]]
        table = data.draw(st.sampled_from(tables), label="table")
        if kind in ("nsys_null", "nsys_text_number", "nsys_name", "nsys_value", "nsys_int64"):
            relax(con, table)
        cols = _columns(con, table)
        col = data.draw(st.sampled_from(cols), label="column")
        rowids = [r[0] for r in con.execute(f'select rowid from "{table}"')]
        some = rowids[: data.draw(st.integers(1, max(1, len(rowids))))] if rowids else []
        if kind == "nsys_drop_table":
            con.execute(f'DROP TABLE "{table}"')
        elif kind == "nsys_rename_column":
            con.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{col}" TO "{col}_renamed"')
        elif kind == "nsys_delete_rows":
            con.executemany(f'DELETE FROM "{table}" WHERE rowid=?', [(r,) for r in some])
        elif kind == "nsys_name":
            text_col = "value" if table == "StringIds" else ("text" if "text" in cols else col)
            con.executemany(f'UPDATE "{table}" SET "{text_col}"=? WHERE rowid=?',
                            [(data.draw(st.sampled_from(HOSTILE_STRINGS)), r) for r in some])
        else:
            value = {"nsys_null": lambda: None,
                     "nsys_int64": lambda: data.draw(st.sampled_from([2 ** 63 - 1, -(2 ** 63), 0, -1])),
                     "nsys_text_number": lambda: data.draw(st.sampled_from(["abc", "12", "", "1e300"])),
                     "nsys_value": lambda: data.draw(st.sampled_from([1e300, -5, 0.5, 10 ** 15, 3]))}[kind]
            con.executemany(f'UPDATE "{table}" SET "{col}"=? WHERE rowid=?', [(value(), r) for r in some])
        con.commit()
    finally:
        con.close()
    return kind


@settings(max_examples=budget(25), **COMMON)
@given(data=st.data())
def test_fuzz_nsys(work, data):
    seed = data.draw(st.sampled_from(NSYS_SEEDS), label="seed")
    d = fresh(work)
    path = d / "export.sqlite"
    shutil.copy(seed, path)
    kind = mutate_nsys(data, path)
    check_promise(path, d / "out.json", kind)
    shutil.rmtree(d)


def test_in_process_exit_codes_are_the_entry_points(tmp_path):
    """run_cli is what `traceview` exits with: the same code and stderr from a real process."""
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [' * 10)[:30])
    out = tmp_path / "out.json"
    code, err = run(bad, out)
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(bad), "-f", "json", "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert (code, err) == (r.returncode, r.stderr) and code == 2 and not out.exists()


# --- the known input-side cases, each as a case of its own ----------------------------------------

def _known(tmp_path, name: str, raw: bytes | None = None, sqlite_edit: str | None = None, kind: str = "") -> None:
    if sqlite_edit is None:
        path = tmp_path / name
        path.write_bytes(raw)
    else:
        path = tmp_path / name
        shutil.copy(GEN / "tiny_breakdown.sqlite", path)
        con = sqlite3.connect(path)
        relax(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute(sqlite_edit)
        con.commit()
        con.close()
    out = tmp_path / "out.json"
    code, err = run(path, out)
    assert code in (0, 2), err
    if code == 2:
        assert err.count("\n") == 1 and path.name in err and not out.exists()


def test_known_deep_nesting(tmp_path):
    text = (GEN / "tiny_breakdown.json").read_text()
    _known(tmp_path, "deep.json", (text.rstrip()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}").encode())


def test_known_flow_id_list(tmp_path):
    doc = kineto_doc(GEN / "tiny_breakdown.json")
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            e["id"] = [1]
    _known(tmp_path, "flow.json", json.dumps(doc).encode())


def test_known_nsys_null_start(tmp_path):
    _known(tmp_path, "null.sqlite", sqlite_edit='UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start=NULL')


def test_known_nsys_renamed_column(tmp_path):
    _known(tmp_path, "renamed.sqlite",
           sqlite_edit='ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN "end" TO end_renamed')


def test_known_nsys_int64_limits(tmp_path):
    _known(tmp_path, "int64.sqlite", sqlite_edit=f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end"={2 ** 63 - 1}')
