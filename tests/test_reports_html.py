"""HTML report (static checks: self-contained, escaped, deterministic) and the charts' data."""
from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser

import pytest
from reports_support import GEN, HOSTILE_ANNOTATION, HOSTILE_KERNEL, analyze, corpus, diff_doc, with_issue6

from traceview.reports import charts, html
from traceview.reports.escape import html as esc_html, script_json


class Page(HTMLParser):
    """Tags, URL-bearing attributes, text, and script bodies of a page (script bodies are not parsed)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list = []
        self.urls: list = []
        self.text: list = []
        self.scripts: list = []
        self._in_script = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        for k, v in attrs:
            if k in ("src", "href", "action", "data", "poster", "srcset", "background", "formaction") and v:
                self.urls.append((tag, k, v))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append([dict(attrs), ""])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None:
            self.scripts[-1][1] += data
        else:
            self.text.append(data)


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    p.close()
    return p


def specs_of(page: str) -> dict:
    p = parse(page)
    blob = [body for attrs, body in p.scripts if attrs.get("id") == "tv-specs"]
    assert len(blob) == 1
    return json.loads(blob[0])


def test_self_contained_and_offline():
    page = html.render(analyze(corpus("kineto", "h200_moe", "overlap.json.gz")))
    p = parse(page)
    assert p.urls == []
    assert not any(tag in ("link", "iframe", "object", "embed", "base") for tag, _ in p.tags)
    csp = [a["content"] for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert len(csp) == 1 and "default-src 'none'" in csp[0] and "connect-src 'none'" in csp[0]
    # Vega, Vega-Lite and vega-embed are inline: one big classic script that defines vegaEmbed
    big = [body for attrs, body in p.scripts if len(body) > 500_000]
    assert len(big) == 1 and "window.vegaEmbed=" in big[0]
    assert not any(a.get("src") for a, _ in p.scripts)
    before_scripts = page.split("<script")[0]                # head (with the style) and the tables
    assert "@import" not in before_scripts and "url(" not in before_scripts
    assert sorted(specs_of(page)) == ["layer_phase", "step_breakdown", "timeline"]  # one rank: no stragglers chart


def test_deterministic():
    doc = analyze(GEN / "straggler_4rank")
    assert html.render(doc) == html.render(json.loads(json.dumps(doc)))


def test_hostile_names_are_escaped(tmp_path):
    hostile_file = tmp_path / f"a|b{HOSTILE_KERNEL}\nx.json"
    shutil.copy(GEN / "hostile_names.json", hostile_file)
    doc = with_issue6(analyze(hostile_file), stall_evidence=f"{HOSTILE_KERNEL}</script><script>alert(2)</script>",
                      stall_stage=HOSTILE_ANNOTATION)
    page = html.render(doc)
    p = parse(page)
    assert not any(t == "img" for t, _ in p.tags)
    # exactly our scripts: the spec JSON, the Vega bundle, the embed code
    assert [a.get("id") for a, _ in p.scripts] == ["tv-specs", None, None]
    text = "".join(p.text)
    assert HOSTILE_KERNEL in text                         # shown as text in the kernel table
    assert f"a|b{HOSTILE_KERNEL}\nx.json" in text          # the file name, as text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    outside_scripts = re.sub(r"<script\b.*?</script>", "", page, flags=re.S)
    assert "<img" not in outside_scripts
    # in the chart specs the names are data, with no raw '<' that could close the script
    spec_blob = [body for a, body in p.scripts if a.get("id") == "tv-specs"][0]
    assert "<" not in spec_blob and "\\u003cimg" in spec_blob
    assert any(HOSTILE_KERNEL in str(v) for v in json.loads(spec_blob)["timeline"]["data"]["values"])


def test_escape_helpers():
    assert esc_html('<a href="x">&\'') == "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"
    assert script_json({"k": "</script><!--\u2028"}) == '{"k":"\\u003c/script\\u003e\\u003c!--\\u2028"}'
    assert json.loads(script_json({"k": "</script>"})) == {"k": "</script>"}


def test_issue6_sections_in_html():
    doc = with_issue6(analyze(GEN / "straggler_4rank"))
    page = html.render(doc)
    text = "".join(parse(page).text)
    for heading in ("Top stalls (2 of 2)", "Stragglers (ranks the others waited for)",
                    "Collectives with the most skew (1 of 1)",
                    "Critical path composition (mean over 4 rank-step window(s))"):
        assert heading in text


# --- charts' data -----------------------------------------------------------------------------------

def values(chart) -> list[dict]:
    spec = chart.to_dict(validate=False)
    data = spec.get("data", {})
    return data.get("values") or next(iter(spec.get("datasets", {}).values()))


def test_step_breakdown_values_from_generator():
    """Bar heights = the generator's own expected compute / idle per step (ms)."""
    exp = json.loads((GEN / "tiny_breakdown.expected.json").read_text())
    doc = analyze(GEN / "tiny_breakdown.json")
    vals = values(charts.step_breakdown(doc))
    for e in exp["steps"]:
        got = {v["part"]: v["ms"] for v in vals if v["step"] == e["step"] and v["rank"] == e["rank"]}
        assert got["compute"] == pytest.approx(e["compute_ns"] / 1e6)
        assert got["idle"] == pytest.approx(e["idle_ns"] / 1e6)
        assert sum(got.values()) == pytest.approx(e["window_ns"] / 1e6)


def test_layer_phase_totals():
    doc = analyze(corpus("kineto", "h200_moe", "overlap.json.gz"))
    vals = values(charts.layer_phase(doc))
    n = len(doc["steps"])
    assert sum(v["ms"] for v in vals) == \
        pytest.approx(sum(r["step_time_ns"] for r in doc["layers"]) / n / 1e6, rel=1e-6)
    layer0_fwd = [v for v in vals if v["bar"] == "layer 0 · forward"]
    assert {v["stage"] for v in layer0_fwd} >= {"attention", "router", "dispatch", "experts", "combine"}


def test_timeline_marks_stalls_and_collectives():
    doc = with_issue6(analyze(GEN / "straggler_4rank"))
    step, why = charts.timeline_step(doc)
    assert step == 1 and why == "the step with the most stall time"
    vals = values(charts.timeline(doc))
    stalls = sorted((v["start"], v["end"]) for v in vals if v["lane"] == "stall")
    assert stalls == [(pytest.approx(0.1), pytest.approx(0.35)), (pytest.approx(0.9), pytest.approx(1.02))]
    coll = {v["rank"]: (v["start"], v["ms"]) for v in vals if v["lane"] == "collective"}
    assert coll == {f"rank {r}": (pytest.approx(0.05 + 0.001 * r), pytest.approx(0.3 - 0.001 * r)) for r in range(4)}


def test_straggler_marking():
    doc = with_issue6(analyze(GEN / "straggler_4rank"))
    assert charts.straggler_ranks(doc) == {3: "last 1/1, caused 0.006 ms wait"}   # 3+2+1 us
    labels = {v["rank"] for v in values(charts.stragglers_chart(doc))}
    assert labels == {"rank 0", "rank 1", "rank 2", "rank 3 ◀ last 1/1, caused 0.006 ms wait"}


def test_waterfall_steps():
    """base 300 ms, +15, +8, -3 -> new 320 ms; the bars float from the running total."""
    vals = values(charts.waterfall(diff_doc(300.0, 320.0)))
    got = [(v["kind"], v["start"], v["end"]) for v in vals]
    # totals drawn from a floor below the lowest level (300 - max(0.5 * (323 - 300), 0.02 * 323) = 288.5)
    assert got == [("step time", 288.5, 300), ("slower", 300, 315), ("slower", 315, 323), ("faster", 323, 320),
                   ("step time", 288.5, 320)]
    vals = values(charts.waterfall(diff_doc(300.0, 325.0)))          # 5 ms the items do not explain
    assert [(v["item"], v["start"], v["end"]) for v in vals][-2:] == [("unexplained", 320, 325), ("new", 287.5, 325)]


def test_diff_html_has_the_waterfall():
    doc = diff_doc()
    page = html.render_diff_html(doc)
    assert html.render(doc) == page
    p = parse(page)
    assert sorted(specs_of(page)) == ["waterfall"]
    assert not any(t == "img" for t, _ in p.tags) and p.urls == []
    text = "".join(p.text)
    assert "+15.000" in text and "-3.000" in text and HOSTILE_KERNEL in text


def test_write_images(tmp_path):
    doc = analyze(GEN / "straggler_4rank")
    written = charts.write_images(doc, tmp_path)
    assert written == [f"charts/{n}.{e}" for n in ("step_breakdown", "layer_phase", "timeline", "stragglers")
                       for e in ("svg", "png")]
    for rel in written:
        data = (tmp_path / rel).read_bytes()
        if rel.endswith(".png"):
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
        else:
            assert data.lstrip().startswith(b"<svg") and b"<path" in data and b"http://" not in data.replace(
                b"http://www.w3.org/", b"")


# --- --out-dir ---------------------------------------------------------------------------------------

def test_out_dir_bundle(tmp_path):
    import subprocess
    import sys

    from helpers import ROOT
    out = tmp_path / "perf"
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(GEN / "straggler_4rank"),
                        "--out-dir", str(out),
                        "-f", "markdown", "-o", str(out / "summary.md")], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    charts_ = [f"charts/{n}.{e}" for n in ("layer_phase", "step_breakdown", "stragglers", "timeline")
               for e in ("png", "svg")]
    assert names == sorted(charts_ + ["report.html", "report.json", "report.md", "summary.md"])
    md = (out / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert sorted(links) == sorted(c for c in charts_ if c.endswith(".png"))
    assert "![" not in (out / "summary.md").read_text()
    assert json.loads((out / "report.json").read_text())["schema"] == "traceview.report/1"


def test_timeline_keeps_the_longest_marks():
    """A capture with thousands of stalls: the chart keeps the TIMELINE_MAX_MARKS longest."""
    import copy
    doc = with_issue6(analyze(GEN / "straggler_4rank"))
    step, _ = charts.timeline_step(doc)
    w = next(s for s in doc["steps"] if s["step"] == step and s["rank"] == 0)
    many = copy.deepcopy(doc)
    n = charts.TIMELINE_MAX_MARKS + 100
    many["stalls"] = [{"rank": 0, "step": step, "layer": None, "phase": None, "stage": None, "cause": "idle",
                       "start_ns": w["start_ns"] + 10 * i, "dur_ns": 1 + (i * 7919) % n, "evidence": {}}
                      for i in range(n)]                      # durations 1..n, each once
    chart = charts.timeline(many)
    vals = values(chart)
    kept = sorted(round(v["ms"] * 1e6) for v in vals if v["lane"] == "stall")
    assert kept == list(range(n - charts.TIMELINE_MAX_MARKS + 1, n + 1))
    assert f"{charts.TIMELINE_MAX_MARKS} longest of {n} stalls shown" in chart.to_dict()["title"]


def test_stragglers_chart_only_with_several_ranks():
    one = analyze(GEN / "tiny_breakdown.json")
    assert len(one["per_rank"]) == 1 and charts.stragglers_chart(one) is None
    assert "stragglers" not in dict(charts.specs(one))
    four = analyze(GEN / "straggler_4rank")
    assert len(four["per_rank"]) == 4 and "stragglers" in dict(charts.specs(four))


def test_stage_colours_fixed_whatever_the_stages_present():
    """A stage keeps its colour whether or not other stages occur (the scale is keyed by name), and
    an unknown stage gets the same colour in every process (not Python's salted hash)."""
    import subprocess
    import sys

    from traceview.reports import palette
    doc = analyze(corpus("kineto", "h200_moe", "overlap.json.gz"))
    full = charts.layer_phase(doc).to_dict(validate=False)["encoding"]["color"]["scale"]
    doc["layers"] = [r for r in doc["layers"] if r["stage"] in ("experts", "combine")]
    part = charts.layer_phase(doc).to_dict(validate=False)["encoding"]["color"]["scale"]
    colour = lambda sc: dict(zip(sc["domain"], sc["range"], strict=True))  # noqa: E731
    assert colour(part) == {k: colour(full)[k] for k in ("experts", "combine")}
    assert colour(full)["experts"] == "#54a24b" and "#e45756" not in colour(full).values()
    code = "from traceview.reports import palette; print(palette.fallback('my_new_stage'))"
    seen = {subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "PYTHONHASHSEED": seed},
                           capture_output=True, text=True).stdout.strip() for seed in ("1", "2", "3")}
    assert seen == {palette.fallback("my_new_stage")} and seen <= set(palette.SPARE)
