"""The typed document (traceview/document/types.py) against real documents, the shared
formatting module against hand-computed strings, and the diff's units by field name."""
from __future__ import annotations

import types
import typing

import pytest
import typing_extensions
from helpers import TRACES

from traceview.document import types as T
from traceview.reports import fmt


def check(value, tp, where: str, problems: list[str]) -> None:
    """Does `value` fit the type `tp` (TypedDicts key by key, recursively)? Appends what does not."""
    if tp is typing.Any:
        return
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        opts = typing.get_args(tp)
        if value is None and type(None) in opts:
            return
        for o in opts:
            trial: list[str] = []
            check(value, o, where, trial)
            if not trial:
                return
        problems.append(f"{where}: {value!r:.60} fits none of {tp}")
        return
    if tp is type(None):
        if value is not None:
            problems.append(f"{where}: expected None, got {value!r:.60}")
        return
    if typing_extensions.is_typeddict(tp):
        if not isinstance(value, dict):
            problems.append(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
            return
        # the types module defers its annotations, so required keys are read from the hints
        full = typing_extensions.get_type_hints(tp, include_extras=True)
        hints = typing_extensions.get_type_hints(tp)
        required = {k for k, h in full.items() if typing.get_origin(h) is not typing_extensions.NotRequired}
        for k in sorted(required - set(value)):
            problems.append(f"{where}: {tp.__name__} lacks the required key {k!r}")
        for k, v in value.items():
            if k not in hints:
                problems.append(f"{where}: key {k!r} is not declared in {tp.__name__}")
            else:
                check(v, hints[k], f"{where}.{k}", problems)
        return
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list, got {type(value).__name__}")
            return
        (item,) = typing.get_args(tp)
        for i, v in enumerate(value):
            check(v, item, f"{where}[{i}]", problems)
        return
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a dict, got {type(value).__name__}")
            return
        _, item = typing.get_args(tp)
        for k, v in value.items():
            check(v, item, f"{where}[{k!r}]", problems)
        return
    ok = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}.get(tp)
    if ok is not None and (not isinstance(value, ok) or (tp is not bool and isinstance(value, bool))):
        problems.append(f"{where}: expected {tp.__name__}, got {value!r:.60}")


def test_the_checker_finds_what_does_not_fit():
    """A check that cannot fail proves nothing: a missing key, an undeclared key and a wrong type."""
    good = {"name": "traceview", "version": "1"}
    assert problems_of(good, T.Tool) == []
    assert problems_of({"name": "traceview"}, T.Tool) == ["doc: Tool lacks the required key 'version'"]
    assert problems_of({**good, "extra": 1}, T.Tool) == ["doc: key 'extra' is not declared in Tool"]
    assert problems_of({"name": "traceview", "version": 1}, T.Tool) == ["doc.version: expected str, got 1"]
    assert problems_of({"rank": 0, "step": None, "cause": "idle", "start_ns": 5, "dur_ns": 2.5}, T.Stall) == []
    assert problems_of({"rank": 0, "step": "x", "cause": "idle", "start_ns": 5, "dur_ns": 2.5}, T.Stall) != []


def problems_of(value, tp) -> list[str]:
    out: list[str] = []
    check(value, tp, "doc", out)
    return out


@pytest.fixture(scope="module")
def documents():
    from traceview.runs import AnalyzeOptions, DiffOptions, run_analyze, run_diff
    h200 = TRACES / "kineto" / "h200_moe"
    if not h200.exists():
        pytest.skip("corpus traces not present")
    report = run_analyze([str(h200 / "overlap.json.gz")], AnalyzeOptions())
    job = run_analyze([str(TRACES / "kineto" / "dlrm_8rank_v100")], AnalyzeOptions())   # collectives, clock
    diff = run_diff([str(h200 / "blocking.json.gz")], [str(h200 / "overlap.json.gz")], DiffOptions())
    return report, job, diff


def test_real_documents_fit_their_types(documents):
    """Every key of a real analyze and diff document is declared, every required one present, and
    every value has the declared type (so what mypy checks in the renderers is what they read)."""
    report, job, diff = documents
    assert problems_of(report, T.ReportDocument) == []
    assert job["collectives"] and problems_of(job, T.ReportDocument) == []
    assert problems_of(diff, T.DiffDocument) == []
    assert T.is_diff(diff) and not T.is_diff(report)


def test_one_ms_one_clip():
    assert fmt.ms(1_234_567_891) == "1,234.568"
    assert fmt.ms(250_000) == "0.250"
    assert fmt.ms(None) == "-"
    assert fmt.signed_ms(250_000) == "+0.250" and fmt.signed_ms(-1_500_000) == "-1.500"
    assert fmt.signed_ms(None) == "+0.000"
    assert fmt.clip("a\n b\tc", 10) == "a b c"
    assert fmt.clip("abcdefghij", 5) == "abcd…"
    assert fmt.table(["a", "bb"], [["x", 1], ["yyy", 22]]) == ["a    bb", "---  --", "x     1", "yyy  22"]


def test_one_budget_headline():
    checked = [{"message": "m1"}, {"message": "m2"}, {"message": "m3"}]
    met = {"file": "b.toml", "checked": checked, "violations": []}
    assert fmt.budget_headline(met) == (True, "Budget b.toml: all 3 threshold(s) met", [])
    bad = {"file": "<b>.toml", "checked": checked, "violations": [{"message": "idle <high>"}]}
    assert fmt.budget_headline(bad, lambda s: s.replace("<", "&lt;").replace(">", "&gt;")) == (
        False, "Budget &lt;b&gt;.toml: 1 of 3 threshold(s) violated", ["idle &lt;high&gt;"])


def test_units_have_named_fields():
    from traceview.diff.decompose import Unit, unit_key
    comm = unit_key({"name": "ncclDevKernel_AllToAll_RING", "class": "comm", "comm_kind": "all_to_all",
                     "layer": 3, "phase": "forward", "stage": "dispatch", "region": "layer"})
    assert comm == Unit(layer=3, phase="forward", stage="dispatch", region="layer", family="comm:all_to_all",
                        cls="comm")
    assert comm.group == (3, "forward", "dispatch", "layer")
