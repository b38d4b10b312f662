"""`traceview history`: nightly reports ordered by their capture time, changes named.

The series are generated from the real report of fixtures/h200_moe_overlap.json.gz (fixtures/nightly.py:
noise on every metric, a planted regression); the expected numbers are computed here from the
generated values, independently of traceview.history.
"""
import json
import re
import statistics

import pytest
from helpers import ROOT
from reports_support import analyze, schema

from fixtures import nightly
from traceview.cli import app
from traceview.history import Rule, build, change_points

FIXTURE = ROOT / "fixtures" / "h200_moe_overlap.json.gz"
RUNNER = None


def cli(*args):
    global RUNNER
    from typer.testing import CliRunner
    RUNNER = RUNNER or CliRunner()
    return RUNNER.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def report():
    return analyze(FIXTURE)          # the `traceview analyze -f json` document, schema-checked


@pytest.fixture(scope="module")
def planted(report, tmp_path_factory):
    """60 nights, 0.7 % noise, the experts stage (and so the step) 8 % of the step slower from night 41."""
    docs = nightly.series(report, nights=60, noise=0.007, planted=nightly.Planted(night=41, pct=8.0), seed=3)
    folder = tmp_path_factory.mktemp("nights")
    paths = nightly.write(docs, folder, seed=3)
    return docs, folder, paths


def _nights_table(md):
    part = md.split("## Nights", 1)[1].split("\n## ", 1)[0]
    return [line for line in part.splitlines() if line.startswith("|")]


def _cells(line):
    return len(re.findall(r"(?<!\\)\|", line))


def _stage_ms(doc, stage):
    s = next(s for s in doc["stages"] if s["stage"] == stage)
    return s["step_time_ns"] / len(doc["steps"]) / 1e6


def test_generated_nights_are_valid_reports_whose_names_and_mtimes_do_not_give_the_order(planted):
    import jsonschema
    docs, folder, paths = planted
    for d in docs[:3] + docs[40:41]:
        jsonschema.Draft202012Validator(schema()).validate(d)
    assert sorted(paths) != paths                                       # names are not in night order
    by_mtime = sorted(paths, key=lambda p: p.stat().st_mtime_ns)
    assert by_mtime != paths                                            # nor are modification times


def test_planted_regression_on_night_41_only(planted):
    docs, folder, paths = planted
    doc = build([folder])
    # ordered by the capture time recorded inside each report
    assert [n["file"] for n in doc["nights"]] == [p.name for p in paths]
    assert [n["capture_epoch_ns"] for n in doc["nights"]] == sorted(d["inputs"][0]["capture_epoch_ns"] for d in docs)
    assert {c["night"] for c in doc["changes"]} == {41}
    assert [n["night"] for n in doc["nights"] if n["changed"]] == [41]
    moved = {c["metric"]: c for c in doc["changes"]}
    # what moved: the step time (and with it TFLOP/s and MFU) and the experts stage; not the rest
    assert set(moved) == {"step_time_ms", "tflops_per_gpu", "mfu_pct", "stage:experts"}
    step = moved["step_time_ms"]
    assert step["kind"] == "regression" and step["file"] == paths[40].name
    # the baseline: the median of the 28 nights before night 41, from the generated values
    values = [d["summary"]["step_time_ns"] / 1e6 for d in docs]
    assert step["from"] == pytest.approx(statistics.median(values[12:40]), rel=1e-12)
    assert step["to"] == pytest.approx(values[40], rel=1e-12)
    assert step["pct"] == pytest.approx(100 * (values[40] / statistics.median(values[12:40]) - 1), rel=1e-9)
    assert 5.0 < step["pct"] < 11.0          # 8 % planted, 0.7 % noise on each side
    t = moved["tflops_per_gpu"]
    assert t["kind"] == "regression" and t["to"] < t["from"]
    assert t["to"] == pytest.approx(docs[40]["flops"]["delivered_tflops_per_gpu"], rel=1e-12)
    assert moved["mfu_pct"]["to"] == pytest.approx(100 * docs[40]["flops"]["mfu"], rel=1e-12)
    # the band each night was judged against: none for the first 7 nights and the 6 after the change
    bands = [n["bands"]["step_time_ms"] for n in doc["nights"]]
    assert [i + 1 for i, b in enumerate(bands) if b is None] == list(range(1, 8)) + list(range(42, 48))
    assert bands[40] == pytest.approx([step["from"] - step["band"], step["from"] + step["band"]], rel=1e-12)
    assert not bands[40][0] <= values[40] <= bands[40][1]
    assert all(b[0] <= v <= b[1] for b, v in zip(bands, values, strict=True) if b is not None and b is not bands[40])
    experts = [_stage_ms(d, "experts") for d in docs]
    assert moved["stage:experts"]["from"] == pytest.approx(statistics.median(experts[12:40]), rel=1e-12)
    # 8 % of a ~301 ms step on a ~144 ms stage: about +17 %
    assert 12 < moved["stage:experts"]["pct"] < 22


@pytest.mark.parametrize("seed", [0, 1, 2, 4, 5])
def test_other_noise_draws_and_a_file_list(report, tmp_path, seed):
    """Any draw of the noise: night 41 and no other; a list of files (shuffled) gives the same."""
    docs = nightly.series(report, nights=60, noise=0.007, planted=nightly.Planted(), seed=seed)
    paths = nightly.write(docs, tmp_path, seed=seed)
    shuffled = sorted(paths, key=lambda p: p.name)
    doc = build(shuffled)
    assert [n["night"] for n in doc["nights"] if n["changed"]] == [41]
    assert "step_time_ms" in doc["nights"][40]["changed"]


def test_a_one_night_spike_is_marked_once(report, tmp_path):
    docs = nightly.series(report, nights=60, noise=0.007,
                          planted=nightly.Planted(night=41, pct=8.0, persist=False), seed=7)
    doc = build(nightly.write(docs, tmp_path, seed=7))
    assert [n["night"] for n in doc["nights"] if n["changed"]] == [41]


def test_no_change_without_a_regression(report, tmp_path):
    docs = nightly.series(report, nights=60, noise=0.007, planted=None, seed=11)
    doc = build([p for p in nightly.write(docs, tmp_path, seed=11)])
    assert doc["changes"] == []


def test_the_rule_by_hand():
    """Window [10, 10, 10, 11, 9, 10, 10]: median 10, MAD 0 -> the band is 3 % of 10 = 0.3."""
    rule = Rule(window=7, k=4.5, min_band_pct=3.0, min_nights=7)
    base = [10, 10, 10, 11, 9, 10, 10]
    assert change_points(base + [10.29], rule) == []
    (c,) = change_points(base + [10.31], rule)
    assert (c["index"], c["from"], c["to"]) == (7, 10, 10.31) and c["band"] == pytest.approx(0.3)
    # MAD 2 (8 and 12 around 10): the band is 4.5 x 1.4826 x 2 = 13.34
    wide = [8, 12, 10, 8, 12, 10, 10]
    assert statistics.median([abs(v - 10) for v in wide]) == 2
    assert change_points(wide + [10 + 4.5 * 1.4826 * 2 - 0.01], rule) == []
    assert len(change_points(wide + [10 + 4.5 * 1.4826 * 2 + 0.01], rule)) == 1
    # fewer nights than min_nights are not judged; a change starts a new regime
    assert change_points([10] * 6 + [50], rule) == []
    series = base + [20] * 10
    assert [c["index"] for c in change_points(series, rule)] == [7]
    # a night without the metric is skipped: the window is the previous nights that have it
    assert [c["index"] for c in change_points([10, None, 10, 10, 10, 10, 10, 10, 20], rule)] == [8]


def test_two_reports_newest_against_the_one_before(planted):
    """With two nights nothing is judged (min_nights), but the newest is set against the previous."""
    docs, _, paths = planted
    doc = build([paths[40], paths[39]])
    assert doc["changes"] == [] and doc["latest"]["night"] == 2 and doc["latest"]["previous"] == 1
    d = {x["metric"]: x for x in doc["latest"]["deltas"]}
    a, b = docs[39]["summary"]["step_time_ns"], docs[40]["summary"]["step_time_ns"]
    assert d["step_time_ms"]["from"] == a / 1e6 and d["step_time_ms"]["to"] == b / 1e6
    assert d["step_time_ms"]["pct"] == pytest.approx(100 * (b - a) / a, rel=1e-9)
    assert "Newest: night 2 vs night 1: step time" in cli("history", paths[39], paths[40], "-f", "markdown").stdout
    assert build([paths[0]])["latest"] is None


def test_fail_on_change_exit_codes(planted):
    _, folder, _ = planted
    assert cli("history", folder, "-f", "json").exit_code == 0
    assert cli("history", folder, "--fail-on-change").exit_code == 1
    assert cli("history", folder, "--fail-on-change", "--fail-last", "20").exit_code == 1     # nights 41..60
    assert cli("history", folder, "--fail-on-change", "--fail-last", "19").exit_code == 0     # nights 42..60
    assert cli("history", folder, "--fail-on-regression").exit_code == 1


def test_fail_on_regression_passes_an_improvement(report, tmp_path):
    """A planted speed-up (-8 % of the step on the experts stage): a change, an improvement."""
    docs = nightly.series(report, nights=30, noise=0.007, planted=nightly.Planted(night=20, pct=-8.0), seed=5)
    folder = tmp_path / "faster"
    nightly.write(docs, folder, seed=5)
    doc = build([folder])
    assert {c["night"] for c in doc["changes"]} == {20}
    assert {c["kind"] for c in doc["changes"]} == {"improvement"}
    assert cli("history", folder, "--fail-on-change").exit_code == 1
    assert cli("history", folder, "--fail-on-regression").exit_code == 0


def test_json_output_matches_its_schema_and_formats(planted, tmp_path):
    import jsonschema
    _, folder, _ = planted
    out = tmp_path / "h.json"
    assert cli("history", folder, "-f", "json", "-o", out).exit_code == 0
    doc = json.loads(out.read_text())
    jsonschema.Draft202012Validator(schema("history.schema.json")).validate(doc)
    assert doc["schema"] == "traceview.history/1" and len(doc["nights"]) == 60
    r = cli("history", folder)
    assert r.exit_code == 0
    assert "night 41" in r.stdout and "step time: " in r.stdout and "regression" in r.stdout
    md = cli("history", folder, "-f", "markdown").stdout
    assert "**night 41**" in md
    # every table row keeps its cell count
    assert len(_nights_table(md)) == 62 and len({_cells(line) for line in _nights_table(md)}) == 1


def test_html_is_self_contained_with_the_changes_in_the_charts(planted, tmp_path):
    from test_html_chromium import Urls
    _, folder, paths = planted
    out = tmp_path / "h.html"
    assert cli("history", folder, "-f", "html", "-o", out).exit_code == 0
    page = out.read_text()
    u = Urls()
    u.feed(page)
    assert u.urls == [] and "link" not in u.tags
    assert "default-src 'none'" in page
    spec = json.loads(page.split('<script type="application/json" id="tv-specs">', 1)[1].split("</script>", 1)[0])
    assert set(spec) == {"history_headline", "history_stages"}
    rows = spec["history_headline"]["datasets"]["history_headline"]
    marked = {(r["night"], r["metric"]) for r in rows if r["change"]}
    assert {n for n, _ in marked} == {41} and len(marked) == 3        # step, TFLOP/s, MFU
    assert len({r["night"] for r in rows}) == 60
    for name, sp in spec.items():
        # one panel per metric: the facet owns the data; a layer with data of its own would show every metric
        assert sp["data"] == {"name": name} and sp["facet"]["row"]["field"] == "metric"
        assert all("data" not in layer for layer in sp["spec"]["layer"])
    assert len(spec["history_stages"]["facet"]["row"]["sort"]) == 7


def test_html_renders_offline_in_chromium(planted, tmp_path):
    from tools import chromium
    chromium()          # skip (or, in CI, fail) when Chromium is missing
    from test_html_chromium import assert_renders_offline, open_page

    from traceview.history_cli import render_history
    _, folder, _ = planted
    result = open_page(render_history(build([folder]), "html"), tmp_path, "history")
    assert_renders_offline(result, ["history_headline", "history_stages"])


# --- bad input ------------------------------------------------------------------------------------

def _one_line_exit_2(r, name):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in r.output, r.stderr


def test_another_schema_unreadable_and_no_capture_time(planted, report, tmp_path):
    _, folder, paths = planted
    diff = tmp_path / "diff.json"
    diff.write_text(json.dumps({"schema": "traceview.diff/1"}))
    _one_line_exit_2(cli("history", paths[0], diff), "diff.json")
    broken = tmp_path / "broken.json"
    broken.write_text(paths[0].read_text()[:1000])
    _one_line_exit_2(cli("history", paths[0], broken), "broken.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/2", "x": 1}))
    _one_line_exit_2(cli("history", other), "other.json")
    old = json.loads(paths[0].read_text())
    for i in old["inputs"]:
        for k in ("capture_time", "capture_epoch_ns", "capture_source"):
            i.pop(k)
    oldp = tmp_path / "old.json"
    oldp.write_text(json.dumps(old))
    r = cli("history", paths[0], oldp)
    _one_line_exit_2(r, "old.json")
    assert "capture time" in r.stderr
    wrong = json.loads(paths[0].read_text())
    wrong["summary"]["step_time_ns"] = "fast"
    wp = tmp_path / "wrong.json"
    wp.write_text(json.dumps(wrong))
    _one_line_exit_2(cli("history", wp), "wrong.json")
    _one_line_exit_2(cli("history", tmp_path / "missing.json"), "missing.json")
    _one_line_exit_2(cli("history", folder, "-f", "pdf"), "--format")
    _one_line_exit_2(cli("history", folder, "--window", "1"), "--window")
    out = tmp_path / "never.html"
    _one_line_exit_2(cli("history", paths[0], diff, "-f", "html", "-o", out), "diff.json")
    assert not out.exists()


def test_a_folder_of_artifacts_skips_the_diff_documents_next_to_the_reports(planted, tmp_path):
    docs, _, _ = planted
    for i, d in enumerate(docs[:10]):
        night = tmp_path / f"artifact-{9 - i}"
        night.mkdir()
        (night / "report.json").write_text(json.dumps(d))
        (night / "diff.json").write_text(json.dumps({"schema": "traceview.diff/1", "verdict": "noise"}))
    doc = build([tmp_path])
    assert [n["file"] for n in doc["nights"]] == [f"artifact-{9 - i}/report.json" for i in range(10)]
    assert any("10 diff/history document(s)" in w for w in doc["warnings"])


def test_hostile_file_names_are_escaped(report, tmp_path):
    docs = nightly.series(report, nights=9, noise=0.0, planted=nightly.Planted(night=9, pct=20), seed=1)
    folder = tmp_path / "n"
    paths = nightly.write(docs, folder)
    hostile = folder / "<img src=x onerror=alert(1)>|a\x1b[31mred.json"
    paths[-1].rename(hostile)
    text = cli("history", folder).stdout
    assert "\x1b" not in text and "\\x1b[31mred" in text
    md = cli("history", folder, "-f", "markdown").stdout
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;\\|a" in md
    assert len({_cells(line) for line in _nights_table(md)}) == 1
    page = cli("history", folder, "-f", "html").stdout
    body = page.split("<script", 1)[0]
    assert "<img" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body


def test_unlistable_folder_is_an_input_error(tmp_path, monkeypatch):
    """A folder that cannot be listed (PermissionError from the walk) names the folder."""
    from pathlib import Path

    from traceview.errors import TraceError

    def denied(self, pattern):
        raise PermissionError(13, "Permission denied", str(self / "inner"))
    (tmp_path / "n").mkdir()
    monkeypatch.setattr(Path, "rglob", denied)
    with pytest.raises(TraceError, match=r"inner: cannot list \(Permission denied\)"):
        build([tmp_path / "n"])
