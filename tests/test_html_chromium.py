"""The HTML report opened in headless Chromium with the network unreachable.

Chromium is Debian's `chromium` package (`.ci/install-chromium.sh` installs it; `.ci/run` calls that).
Without it these tests are skipped with the reason, except in CI (`CI=true`), where they fail
(tests/tools.py).

Each page is loaded from a file:// URL with a proxy on a dead port and every host name unresolvable,
a fresh profile, and a virtual-time budget so the charts finish rendering; `--dump-dom` gives the DOM
afterwards. A small script put at the top of a copy of the page records console.error, uncaught
errors, rejected promises, CSP violations (any attempted fetch) and alert() calls into a <pre> the
dumped DOM shows; Chromium's own log (`--enable-logging=stderr`) must hold no console line at all.
The screenshot of the real-trace report is kept in tests/artifacts/ (ignored by git).
"""
from __future__ import annotations

import json
import re
import subprocess
from html.parser import HTMLParser

import pytest
from helpers import ROOT
from reports_support import GEN, HOSTILE_KERNEL, analyze, corpus, with_issue6
from tools import chromium

from traceview.reports import html as html_report

ARTIFACTS = ROOT / "tests" / "artifacts"


@pytest.fixture(autouse=True)
def _needs_chromium():
    chromium()          # skip (or, in CI, fail) before any work when Chromium is missing

HOOK = """<script>(function () {
  var log = [];
  function add(m) {
    log.push(String(m));
    var el = document.getElementById('tv-console');
    if (!el && document.body) {
      el = document.createElement('pre'); el.id = 'tv-console'; document.body.appendChild(el);
    }
    if (el) { el.textContent = JSON.stringify(log); }
  }
  var ce = console.error;
  console.error = function () {
    add('console.error: ' + Array.prototype.join.call(arguments, ' ')); return ce.apply(console, arguments);
  };
  window.alert = function (m) { add('alert: ' + m); };
  window.addEventListener('error', function (e) {
    add('error: ' + (e.message || (e.target && e.target.outerHTML) || e));
  }, true);
  window.addEventListener('unhandledrejection', function (e) { add('rejection: ' + e.reason); });
  document.addEventListener('securitypolicyviolation', function (e) {
    add('csp: ' + e.violatedDirective + ' ' + e.blockedURI);
  });
  window.addEventListener('load', function () { add('loaded'); });
})();</script>"""


def chromium_flags(profile) -> list[str]:
    return [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
            f"--user-data-dir={profile}", "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--window-size=1280,4200"]


def open_page(html_text: str, tmp_path, name: str, screenshot=None) -> dict:
    """Load a hooked copy of the page; return the dumped DOM, recorded events and console log lines."""
    assert html_text.index("<head>") < 100      # our <head>, not a string inside the inlined Vega bundle
    page = tmp_path / f"{name}.html"
    page.write_text(html_text.replace("<head>", "<head>" + HOOK, 1), encoding="utf-8")
    run = subprocess.run(chromium_flags(tmp_path / f"profile-{name}") + ["--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    m = re.search(r'<pre id="tv-console">(.*?)</pre>', dom, re.S)
    events = json.loads(_unescape(m.group(1))) if m else None
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    if screenshot is not None:
        shot = subprocess.run(chromium_flags(tmp_path / f"profile-{name}-shot")
                              + [f"--screenshot={screenshot}", page.as_uri()],
                              capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0, shot.stderr[-2000:]
    return {"dom": dom, "events": events, "console": console}


def _unescape(s: str) -> str:
    import html
    return html.unescape(s)


class Charts(HTMLParser):
    """Per chart container (div.chart[data-chart]): rendered flag and counts of SVG elements inside."""

    def __init__(self):
        super().__init__()
        self.charts: dict = {}
        self.stack: list = []           # open elements: (tag, chart name or None)
        self.imgs = 0
        self.body_attrs: dict = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs += 1
        if tag == "body":
            self.body_attrs = a
        current = next((c for _, c in reversed(self.stack) if c), None)
        name = a.get("data-chart") if tag == "div" and "chart" in (a.get("class") or "").split() else None
        if name:
            self.charts[name] = {"rendered": a.get("data-rendered"), "svg": 0, "marks": 0,
                                 "error": "chart-error" in (a.get("class") or "")}
        if current and tag == "svg":
            self.charts[current]["svg"] += 1
        if current and tag in ("path", "rect", "line", "text"):
            self.charts[current]["marks"] += 1
        if tag not in ("meta", "br", "img", "input", "link", "hr", "wbr", "col", "area", "source"):
            self.stack.append((tag, name))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.stack and self.stack[-1][0] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break


def parse(dom: str) -> Charts:
    p = Charts()
    p.feed(dom)
    return p


class Urls(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls: list = []
        self.tags: list = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "action", "data", "poster", "srcset", "background") and v:
                self.urls.append((tag, k, v))


def assert_renders_offline(result: dict, expected_charts: list[str]) -> Charts:
    p = parse(result["dom"])
    assert sorted(p.charts) == sorted(expected_charts)
    for name, c in p.charts.items():
        assert not c["error"], f"chart {name} failed to render"
        assert c["rendered"] == "1", f"chart {name} not rendered"
        assert c["svg"] >= 1 and c["marks"] >= 10, f"chart {name} has an empty SVG: {c}"
    assert p.body_attrs.get("data-charts-done") == str(len(expected_charts))
    assert result["events"] == ["loaded"], result["events"]
    assert result["console"] == [], result["console"]
    return p


def test_h200_report_renders_offline_in_chromium(tmp_path):
    doc = analyze(corpus("kineto", "h200_moe", "overlap.json.gz"))
    page = html_report.render(doc)
    # nothing to fetch: no URL in any src/href, no <link>, CSP forbids every fetch
    u = Urls()
    u.feed(page)
    assert u.urls == [] and "link" not in u.tags
    assert "default-src 'none'" in page and "connect-src 'none'" in page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n")
    shot = ARTIFACTS / "html_report_h200_moe_overlap.png"
    shot.unlink(missing_ok=True)
    result = open_page(page, tmp_path, "h200", screenshot=shot)
    p = assert_renders_offline(result, ["step_breakdown", "layer_phase", "timeline"])   # one rank: no stragglers
    # the step-breakdown chart draws one bar per (step, part): 3 steps x 4 parts
    assert p.charts["step_breakdown"]["marks"] >= 12
    assert shot.exists() and shot.stat().st_size > 30_000
    print(f"screenshot: {shot}")


def test_hostile_names_do_not_inject_in_chromium(tmp_path):
    """The kernel `<img src=x onerror=alert(1)>` shows as text; no <img> element, no alert()."""
    doc = with_issue6(analyze(GEN / "hostile_names.json"),
                      stall_evidence=f"{HOSTILE_KERNEL} </script><script>alert(2)</script>")
    result = open_page(html_report.render(doc), tmp_path, "hostile")
    p = assert_renders_offline(result, ["step_breakdown", "layer_phase", "timeline"])
    assert p.imgs == 0
    assert "&lt;img src=x onerror=alert(1)&gt;" in result["dom"]


def test_detection_can_fail(tmp_path):
    """Control: a broken chart spec, a console error and an attempted fetch are all caught."""
    doc = analyze(GEN / "tiny_breakdown.json")
    page = html_report.render(doc)
    page = page.replace('"mark":{"type":"bar"}', '"mark":{"type":"no-such-mark"}', 1)
    head, tail = page.rsplit("</body>", 1)       # our </body> (the inlined bundle holds the string too)
    page = (head + '<script>console.error("boom");</script>'
            '<div style="background:url(https://example.invalid/x.png)">x</div></body>' + tail)
    result = open_page(page, tmp_path, "control")
    p = parse(result["dom"])
    failed = [n for n, c in p.charts.items() if c["error"] or c["svg"] == 0]
    assert len(failed) == 1
    assert any(e.startswith("console.error: boom") for e in result["events"])
    assert any(e.startswith("csp: ") for e in result["events"])
    assert result["console"], "chromium's log shows no console line"
    with pytest.raises(AssertionError):
        assert_renders_offline(result, sorted(p.charts))


def test_diff_report_renders_offline_in_chromium(tmp_path):
    """The diff report of two corpus traces: the waterfall renders, one bar per explanation item + 2."""
    from traceview import runs as document
    doc = document.run_diff([str(corpus("kineto", "h200_moe", "blocking.json.gz"))],
                            [str(corpus("kineto", "h200_moe", "overlap.json.gz"))])
    page = html_report.render_diff_html(doc)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n")
    shot = ARTIFACTS / "html_diff_h200_moe_blocking_vs_overlap.png"
    result = open_page(page, tmp_path, "diff", screenshot=shot)
    assert_renders_offline(result, ["waterfall"])
    bars = len(re.findall(r'role="graphics-symbol"[^>]*aria-roledescription="bar"', result["dom"]))
    assert bars == len(doc["explanation"]) + 2
    assert shot.exists()
    print(f"screenshot: {shot}")


class Marks(HTMLParser):
    """Every SVG bar Vega drew, per chart: its aria-label fields and its fill/stroke attributes."""

    def __init__(self):
        super().__init__()
        self.marks: list = []
        self.chart = None
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and a.get("data-chart"):
            self.chart = a["data-chart"]
        if tag == "path" and a.get("aria-roledescription") == "bar" and self.chart:
            fields = dict(kv.split(": ", 1) for kv in (a.get("aria-label") or "").split("; ") if ": " in kv)
            self.marks.append({"chart": self.chart, "fields": fields, "fill": a.get("fill"),
                               "stroke": a.get("stroke"), "stroke-width": a.get("stroke-width")})


def rendered_marks(dom: str) -> list[dict]:
    p = Marks()
    p.feed(dom)
    return p.marks


# The colours the reports promise (README / reports/palette.py), written out here as the spec.
STAGE_HEX = {"attention": "#72b7b2", "router": "#b279a2", "dispatch": "#9d755d", "experts": "#54a24b",
             "shared_expert": "#eeca3b", "combine": "#2f5f8a", "other": "#8c8c8c"}
CAUSE_HEX = {"exposed_a2a": "#e45756", "exposed_comm": "#ff9da6", "peer_wait": "#b07aa1", "imbalance": "#9c755f",
             "host_sync": "#f28e2b", "launch_bound": "#edc948", "idle": "#79706e"}
EXPOSED_COMM_RED = "#e45756"


def test_rendered_colours_stall_causes_and_fixed_stage_colours(tmp_path):
    """In the SVG Chromium renders: each stall bar of the timeline is filled with its cause's colour
    and has no dark outline; each stage has the same colour in two different reports (and none is
    the red of exposed communication)."""
    reports = {
        "overlap": analyze(corpus("kineto", "h200_moe", "overlap.json.gz")),
        "hostbound": analyze(corpus("kineto", "h200_moe_hostbound", "blocking.json.gz")),
        "planted": with_issue6(analyze(GEN / "straggler_4rank")),     # exposed_a2a and host_sync stalls
    }
    stage_fills: dict = {}
    causes_seen = set()
    for name, doc in reports.items():
        result = open_page(html_report.render(doc), tmp_path, name)
        marks = rendered_marks(result["dom"])
        stalls = [m for m in marks if m["chart"] == "timeline" and m["fields"].get("what", "").startswith("stall: ")]
        assert stalls, f"{name}: no stall bar rendered"
        for m in stalls:
            cause = m["fields"]["what"][len("stall: "):]
            causes_seen.add(cause)
            assert m["fill"] == CAUSE_HEX[cause], (name, cause, m["fill"])
            assert m["stroke"] in (None, "none", "transparent") or m["stroke"] == m["fill"], m
        fills: dict = {}
        for m in marks:
            if m["chart"] == "layer_phase":
                fills.setdefault(m["fields"]["stage"], set()).add(m["fill"])
        assert fills and all(len(v) == 1 for v in fills.values()), fills
        stage_fills[name] = {k: v.pop() for k, v in fills.items()}
    assert {"launch_bound", "exposed_a2a", "host_sync"} <= causes_seen
    a, b = stage_fills["overlap"], stage_fills["hostbound"]
    assert set(a) == set(b) and len(a) >= 5
    assert a == b == {k: STAGE_HEX[k] for k in a}
    assert EXPOSED_COMM_RED not in a.values()
