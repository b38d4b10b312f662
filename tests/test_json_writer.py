"""The JSON writer (reports/json_report.py) writes the bytes the standard library writes: every
document here is also written by json.dumps with the report's (and the diff's) settings, and the
two outputs are compared byte for byte. Where the fast path cannot be identical (a key that is not
a str, a subclass, a type of its own, NaN), it must step aside: the test checks both that it did
(`_fast` gives None) and that the bytes, or the error, are the standard library's."""
import datetime
import decimal
import enum
import json
import math
import pickle
import random
import struct

import pytest
from helpers import TRACES

from traceview.plain_data import scan
from traceview.reports import json_report
from traceview.reports.escape import json_controls

# the suite validates every report rendered in a test against the report schema (conftest); the
# documents here are not reports: the writer's own functions are used
RENDER, RENDER_BYTES = json_report.render, json_report.render_bytes


@pytest.fixture(autouse=True)
def _writer_unvalidated(monkeypatch):
    monkeypatch.setattr(json_report, "render", RENDER)
    monkeypatch.setattr(json_report, "render_bytes", RENDER_BYTES)


def stdlib_report(doc) -> str:
    return json_controls(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)) + "\n"


def stdlib_diff(doc) -> str:
    return json_controls(json.dumps(doc, indent=1, sort_keys=True, default=str)) + "\n"


def outcome(fn, doc):
    """What fn(doc) gives: ("ok", output) or ("error", exception type, message)."""
    try:
        return ("ok", fn(doc))
    except (TypeError, ValueError) as e:
        return ("error", type(e), str(e))


def same_as_stdlib(doc, fast_expected=True):
    want = outcome(stdlib_report, doc)
    assert outcome(json_report.render, doc) == want
    if want[0] == "ok":
        assert json_report.render_bytes(doc) == want[1].encode("utf-8")
    assert outcome(json_report.render_diff, doc) == outcome(stdlib_diff, doc)
    assert (json_report._fast(doc, 2) is not None) is fast_expected
    assert (json_report._fast(doc, 1) is not None) is fast_expected


FLOATS = [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 2.5, 1e16, -1e16, 1e15, 9999999999999998.0, 1e17, 1e22, 1.5e300,
          1.7976931348623157e308, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-05, -1e-05, 1e-07, 9.99e-05,
          0.0001, 0.000123, 1.2345678901234568e16, 1234567890123456.8, 123456789012345678.0, 5.8776390165364394e-05]


@pytest.mark.parametrize("x", FLOATS, ids=repr)
def test_floats_written_as_python_repr(x):
    """msgspec writes 1e16 as `1e16` and 1e-05 as `0.00001`: the writer gives Python's repr."""
    doc = {"v": x, "in_list": [x, 1, x], "nested": {"deep": [[x]]}, "tuple": (x,)}
    same_as_stdlib(doc)
    assert repr(x) in json_report.render(doc)


def test_random_floats_over_the_whole_range():
    rng = random.Random(7)
    values = []
    for _ in range(20000):
        x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(x):
            values.append(x)
    values += [rng.choice((1, -1)) * 10 ** rng.uniform(-8, 18) for _ in range(20000)]
    values += [rng.randrange(10 ** 17) / d for d in (1, 10, 1000, 3, 7) for _ in range(2000)]
    doc = {"floats": values, "rows": [{"x": v, "s": str(i)} for i, v in enumerate(values[::50])]}
    same_as_stdlib(doc)


def test_strings_escapes_and_non_ascii():
    names = ["plain", "é ü ß", "日本語", "😀 astral", "\uffff", "tab\tnew\nline\r", "\x00\x01\x1b\x1f",
             "\x7f DEL", "\x80\x85\x9f C1", "\u2028 \u2029 separators", 'quote " and \\ backslash', "/slash",
             "</script>", "\u00a0\u00b5\u00ff", "\u2014 em dash \u2026", ""]
    doc = {"names": names, "by_name": {n: i for i, n in enumerate(names)}, "é": 1, "z": 2, "Z": 3, "😀": 4}
    same_as_stdlib(doc)
    out = json_report.render(doc)
    assert "\\u007f" in out and "\\u0085" in out and "\\u2028" in out and "日本語" in out  # raw UTF-8, escaped controls
    assert json.loads(out) == json.loads(stdlib_report(doc))


def test_ints_bools_none_and_containers():
    doc = {"ints": [0, -1, 2 ** 31, 2 ** 53 + 1, 2 ** 63, 2 ** 64, -2 ** 63 - 1, 10 ** 30], "bools": [True, False],
           "none": None, "empty_list": [], "empty_dict": {}, "nested_empty": [[], {}, [[]], {"a": {}}],
           "tuple": (1, (2, 3), []), "deep": {"a": {"b": {"c": {"d": [1, {"e": None}]}}}},
           "mixed": [1, "a", 1.5, None, True, {"k": [1e-05]}]}
    same_as_stdlib(doc)


def test_keys_sorted_as_python_sorts_them():
    rng = random.Random(3)
    alphabet = "aAzZ09_-. éß日😀\x7f\u2028"
    keys = {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(400)}
    doc = {k: {k2: 1 for k2 in list(keys)[:20]} for k in keys}
    same_as_stdlib(doc)


def random_doc(rng: random.Random, depth: int = 0):
    kind = rng.random()
    if depth > 4 or kind < 0.45:
        return rng.choice([
            lambda: rng.randint(-10 ** 12, 10 ** 12),
            lambda: rng.random() * 10 ** rng.randint(-9, 18),
            lambda: rng.choice([True, False, None]),
            lambda: "".join(rng.choice("ab\"\\\n\x1f\x7fé😀\u2028 ") for _ in range(rng.randint(0, 8))),
        ])()
    if kind < 0.7:
        return [random_doc(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {"".join(rng.choice("abcé_") for _ in range(rng.randint(0, 4))): random_doc(rng, depth + 1)
            for _ in range(rng.randint(0, 5))}


def test_random_documents():
    rng = random.Random(11)
    for _ in range(300):
        same_as_stdlib({"doc": random_doc(rng)})


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


class Count(int):
    def __repr__(self):
        return "Count!"


class Share(float):
    pass


@pytest.mark.parametrize("doc", [
    {1: "int key"}, {"a": 1, 2: "mixed keys"}, {None: 1, True: 2, 1.5: 3}, {"v": Name("sub")}, {"v": Count(4)},
    {"v": Share(0.5)}, {"v": Level.HIGH}, {"v": [1, Level.HIGH]}, {"v": {"w": (Count(1),)}}, {Name("k"): {3: 4}},
], ids=repr)
def test_what_the_fast_path_cannot_promise_goes_to_the_standard_library(doc):
    same_as_stdlib(doc, fast_expected=False)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1.0, math.nan]], ids=repr)
def test_nan_refused_as_the_standard_library_refuses_it(value):
    doc = {"v": value}
    assert json_report._fast(doc, 2) is None
    with pytest.raises(ValueError) as got:
        json_report.render(doc)
    with pytest.raises(ValueError) as want:
        stdlib_report(doc)
    assert str(got.value) == str(want.value)
    with pytest.raises(ValueError):
        json_report.render_bytes(doc)
    assert json_report.render_diff(doc) == stdlib_diff(doc)     # the diff writes NaN (allow_nan default)
    assert "NaN" in stdlib_diff({"v": math.nan})


@pytest.mark.parametrize("value", [datetime.datetime(2026, 1, 2, 3, 4, 5), datetime.date(2026, 1, 2),
                                   decimal.Decimal("1.5"), b"bytes", {1, 2}, frozenset({3}), Color.RED,
                                   complex(1, 2), object()], ids=lambda v: type(v).__name__)
def test_types_json_refuses_stay_refused_and_the_diff_writes_str(value):
    """msgspec would write a datetime, a set or an Enum; json.dumps refuses them (the report) or
    writes str() of them (the diff, default=str): the writer does exactly that."""
    doc = {"v": value, "ok": [1, 2]}
    assert json_report._fast(doc, 2) is None
    with pytest.raises(TypeError):
        stdlib_report(doc)
    with pytest.raises(TypeError):
        json_report.render(doc)
    assert json_report.render_diff(doc) == stdlib_diff(doc)


def test_lone_surrogate_goes_to_the_standard_library():
    """A file name that is not UTF-8 comes back from the OS with lone surrogates: msgspec cannot
    write it; json.dumps writes it into a str, which cannot be encoded as UTF-8 (as before)."""
    doc = {"file": "run\udc80.json", "v": [1e-05]}
    assert json_report._fast(doc, 2) is None
    assert json_report.render(doc) == stdlib_report(doc)
    with pytest.raises(UnicodeEncodeError):
        json_report.render_bytes(doc)
    assert json_report.render_diff(doc) == stdlib_diff(doc) and "\\udc80" in stdlib_diff(doc)


def test_deep_document():
    doc: dict = {"v": 1e-05}
    for _ in range(200):
        doc = {"d": [doc]}
    same_as_stdlib(doc)


def test_diff_is_ascii_escaped_as_json_dumps_does():
    doc = {"name": "é😀\u2028\x7f\x85日", "n": [1e-05, 2.5], "k": {"ü": 1}}
    same_as_stdlib(doc)
    out = json_report.render_diff(doc)
    assert out.isascii() and "\\ud83d\\ude00" in out and "\\u00e9" in out


def test_scan_shape():
    assert scan({"a": [1, "x", None, True, 1.5, {"b": []}]}) == scan({}) and scan({}).plain
    assert scan({"a": (1,)}).tuples and not scan({"a": [1]}).tuples
    assert scan({"a": [[1e-05]]}).exponent_floats and scan({"a": {"b": 1e16}}).exponent_floats
    assert not scan({"a": [0.0, -0.0, 0.0001, 9999999999999998.0]}).exponent_floats
    assert not scan({"a": [1.0, math.nan]}).finite and not scan({"a": math.inf}).finite
    assert not scan({"a": Name("x")}).plain and not scan({"a": {1, 2}}).plain and not scan(Count(1)).plain
    assert scan("just a string").plain and scan(1.5).plain and not scan(Share(1)).plain


def test_containers_without_odd_floats_are_shared_not_copied():
    rows = [{"x": 1.5} for _ in range(100)]
    doc = {"rows": rows, "odd": [1e-05]}
    prepared = json_report._with_raw_floats(doc)
    assert prepared is not doc and prepared["rows"] is rows and doc["odd"] == [1e-05]


def test_a_corpus_document(tmp_path):
    """A real report document (the 8-rank DLRM job) written both ways."""
    from traceview.document.options import AnalyzeOptions
    from traceview.runs import run_analyze
    doc = run_analyze([str(TRACES / "kineto" / "dlrm_8rank_v100")], AnalyzeOptions())
    assert json_report._fast(doc, 2) is not None
    same_as_stdlib(doc)


def test_long_lists_written_by_another_process_give_the_same_report(tmp_path):
    """A mapped job's long lists (rows in files: a chunk file of pack_reader, spilled parts merged
    by sort_rows) are written by a worker (json_report.list_body_file, given PackedRows.source):
    the report built from those pieces is the standard library's bytes, floats that Python writes
    with an exponent and control characters included; a list whose float needs no exponent in a
    document that has some elsewhere is written the same."""
    import multiprocessing as mp

    import pyarrow as pa

    from traceview import mapped
    from traceview.document import packed
    rnd = random.Random(3)
    rows = [{"i": i, "f": rnd.choice([0.5, 1e-7, 2.5e17, 3.25]), "s": rnd.choice(["a\x7fb", "é", "x\u2028y"]),
             "n": None, "l": [i, {"k": True}]} for i in range(5000)]
    table = pa.Table.from_pylist([{"a": i, "g": i / 8} for i in range(6000)])
    in_file = packed.pack_reader(table.to_batches(max_chunksize=700), str(tmp_path / "t.rows"), [])
    parts = []
    for j in range(3):
        rb, _ = packed.presort(packed.row_bytes(rows[j::3]), lambda r: (r["s"], r["i"]))
        rb.spill(str(tmp_path / f"p{j}.rows"))
        # as the parent gets a worker's part: pickled as its files' paths, its rows, ends and keys mapped
        back = pickle.loads(pickle.dumps(rb))
        assert len(back.maps) == 2 and back.keys.equals(rb.keys) and list(back.ends) == list(rb.ends)
        parts.append(back)
    merged, _ = packed.sort_rows(parts, lambda r: (r["s"], r["i"]), keys=False)
    doc = {"plain": in_file, "merged": merged, "small": [1.5, "x"], "top": 1e-9}
    want = stdlib_report({k: list(v) if type(v) is packed.PackedRows else v for k, v in doc.items()}).encode()
    assert b"".join(json_report.pieces(doc)) == want
    formatted = {}
    with mp.get_context("spawn").Pool(1) as pool:          # another process, as a pool worker
        for k in ("plain", "merged"):
            src = doc[k].source()
            assert src is not None
            path = str(tmp_path / f"{k}.body")
            size = pool.apply(json_report.list_body_file, (src, path))
            formatted[k] = mapped._file_pieces(path, size, piece=4096)
    got = b"".join(json_report.pieces(doc, scan(doc), formatted))
    assert got == want
    assert b"".join(json_report.pieces(doc, scan(doc), formatted)) == want        # written twice alike
    assert packed.PackedRows([b"\x90"] * 0, 0, scan([])).source() is None         # rows in memory: none


def test_long_lists_written_in_ranges_by_several_tasks_give_the_same_report(tmp_path, monkeypatch):
    """Each long list cut into ranges of chunks (mapped._body_ranges: a merged source cut to its
    rows, a file's given the chunks to write), each range written by its own task, the ranges
    joined as list_body joins chunks: the standard library's report, byte for byte."""
    import pyarrow as pa

    from traceview import mapped
    from traceview.document import packed
    rnd = random.Random(4)
    rows = [{"i": i, "f": rnd.choice([0.5, 1e-7, 2.5e17]), "s": rnd.choice(["a", "é", "x\u2028y"])}
            for i in range(7000)]
    table = pa.Table.from_pylist([{"a": i, "g": i / 8} for i in range(9000)])
    in_file = packed.pack_reader(table.to_batches(max_chunksize=700), str(tmp_path / "t.rows"), [])
    parts = []
    for j in range(2):
        rb = packed.row_bytes(rows[j * 3500:(j + 1) * 3500])
        rb.spill(str(tmp_path / f"p{j}.rows"))
        parts.append(pickle.loads(pickle.dumps(rb)))
    doc = {"plain": in_file, "joined": packed.concatenated(parts), "top": 1e-9}
    want = stdlib_report({k: list(v) if type(v) is packed.PackedRows else v for k, v in doc.items()}).encode()
    monkeypatch.setattr(mapped, "BODY_MIN_CHUNKS", 2)
    todo = [(k, doc[k].source()) for k in ("plain", "joined")]
    tasks = mapped._body_ranges(todo, workers=2)        # 9 + 7 chunks in ranges of 3: 6 tasks
    assert [(k, lo, hi) for k, _, lo, hi in tasks][:3] == [("plain", 0, 3), ("plain", 3, 6), ("plain", 6, 9)]
    cut = [src for k, src, _, _ in tasks if k == "joined"]
    assert [src[5] for src in cut] == [3072, 3072, 856] and sum(len(src[2]) for src in cut) == 7000
    pieces: dict = {}
    for i, (k, src, lo, hi) in enumerate(tasks):
        path = str(tmp_path / f"b{i}.body")
        pieces.setdefault(k, []).append(mapped._file_pieces(path, json_report.list_body_file(src, path, lo, hi), 4096))
    formatted = {k: mapped._joined_pieces(fns) for k, fns in pieces.items()}
    assert b"".join(json_report.pieces(doc, scan(doc), formatted)) == want


def test_long_list_ranges_come_from_their_tasks_files_or_are_written_here(tmp_path, monkeypatch):
    """The ranges of a mapped job's long lists as the report takes them (mapped._Bodies): each from
    its task's file once the task is done, a range whose task failed written by this process
    (json_report.list_body_of) and only that one; the standard library's report, byte for byte."""
    from concurrent.futures import Future

    import pyarrow as pa

    from traceview import mapped
    from traceview.document import packed
    rows = [{"i": i, "f": [0.5, 1e-7, 2.5e17][i % 3], "s": "x\u2028y" if i % 5 else "é"} for i in range(5000)]
    parts = []
    for j in range(2):
        rb = packed.row_bytes(rows[j * 2500:(j + 1) * 2500])
        rb.spill(str(tmp_path / f"p{j}.rows"))
        parts.append(pickle.loads(pickle.dumps(rb)))
    table = pa.Table.from_pylist([{"a": i, "g": i / 8} for i in range(6000)])
    doc = {"joined": packed.concatenated(parts), "top": 1e-9,
           "plain": packed.pack_reader(table.to_batches(max_chunksize=700), str(tmp_path / "t.rows"), [])}
    want = stdlib_report({k: list(v) if type(v) is packed.PackedRows else v for k, v in doc.items()}).encode()
    monkeypatch.setattr(mapped, "BODY_MIN_CHUNKS", 2)
    tasks = mapped._body_ranges([(k, doc[k].source()) for k in ("joined", "plain")], workers=2)
    assert len(tasks) >= 4
    paths, futs = [], []
    for i, (_, src, lo, hi) in enumerate(tasks):
        paths.append(str(tmp_path / f"b{i}.body"))
        fut: Future = Future()
        if i % 2:
            fut.set_exception(OSError("the task's worker died"))
        else:
            fut.set_result(json_report.list_body_file(src, paths[-1], lo, hi))
        futs.append(fut)
    here = []
    real = json_report.list_body_of
    monkeypatch.setattr(json_report, "list_body_of", lambda *a: here.append(a[1:]) or real(*a))
    bodies = mapped._Bodies(tasks, paths, futs)
    idx: dict = {}
    for i, (k, _, _, _) in enumerate(tasks):
        idx.setdefault(k, []).append(i)
    formatted = {k: mapped._joined_pieces([bodies.lazy(i) for i in ii]) for k, ii in idx.items()}
    assert here == []                          # nothing taken before the report is written
    assert b"".join(json_report.pieces(doc, scan(doc), formatted)) == want
    assert here == [(lo, hi) for i, (_, _, lo, hi) in enumerate(tasks) if i % 2]

