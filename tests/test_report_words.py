"""What a person reads, over real corpus reports (analyze and diff; text, Markdown and HTML):
no raw `*_ns` key, no dict dump, no fractional count; layer and stage tables whose parts add up
to their total in every row, and whose totals match the document computed independently here."""
from __future__ import annotations

import functools
import re
from html.parser import HTMLParser

import pytest
from reports_support import analyze, corpus

from traceview.reports import diff_markdown, diff_text, html, markdown, text

ANALYZE = {
    "h200_overlap": [("kineto", "h200_moe", "overlap.json.gz")],
    "h200_hostbound": [("kineto", "h200_moe_hostbound", "blocking.json.gz")],
    "dlrm_8rank": [("kineto", "dlrm_8rank_v100")],
    "nsys_h100_a2a": [("nsys", "h100_2gpu_train_a2a_2026.2.sqlite")],
    "hta_nccl": [("kineto", "hta_nccl_parser_config", "nccl_data.json.gz")],
    "moe_b300": [("kineto", "tracelens_moe_b300", "moe_01_many_experts_few_tokens.json.gz")],
}
DIFFS = {
    "h200_blocking_vs_overlap": (("kineto", "h200_moe", "blocking.json.gz"), ("kineto", "h200_moe", "overlap.json.gz")),
    "hostbound_overlap_vs_blocking": (("kineto", "h200_moe_hostbound", "overlap.json.gz"),
                                      ("kineto", "h200_moe_hostbound", "blocking.json.gz")),
    "hta_compare": (("kineto", "hta_trace_compare_base", "base.json.gz"),
                    ("kineto", "hta_trace_compare_test", "test.json.gz")),
}
COUNT_HEADERS = re.compile(r"\b(count|calls|times last)\b")
COUNT_CELL = re.compile(r"^(-|<1|~?\d[\d,]*)( (->|→) (-|<1|~?\d[\d,]*))?$")
RAW_NS = re.compile(r"\b[a-z][a-z0-9]*(_[a-z0-9]+)*_ns\b")
RAW_KEY = re.compile(r"[a-z0-9]_[a-z]")            # snake_case: a document key, not a column name
DICT_DUMP = re.compile(r"""[{\[,]\s*['"][\w ]+['"]\s*:|\{\s*\w+\s*:""")


def _paths(parts):
    p = corpus(*parts)
    if not p.exists():
        pytest.skip(f"corpus trace missing: {p}")
    return p


@functools.cache
def _analyze_doc(name):
    return analyze(*[_paths(parts) for parts in ANALYZE[name]])


@functools.cache
def _diff_doc(name):
    from traceview.runs import run_diff
    base, new = DIFFS[name]
    return run_diff([str(_paths(base))], [str(_paths(new))])


# --- tables as a reader sees them -------------------------------------------------------------------

_DASHES = re.compile(r"^\s*-+( {2,}-+)*\s*$")


def text_tables(s: str) -> list[tuple[list[str], list[list[str]]]]:
    """(headers, rows) of each terminal table: a header line over a line of dash groups; columns
    are the dash groups' spans; the table ends at the first blank or unindented prose line."""
    lines = s.splitlines()
    out = []
    for i in range(1, len(lines)):
        if not _DASHES.match(lines[i]) or not lines[i].strip():
            continue
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[i])]

        def cells(line, spans=spans):
            return [line[a:b if k + 1 < len(spans) else None].strip() for k, (a, b) in enumerate(spans)]
        rows = []
        for line in lines[i + 1:]:
            if not line.strip() or len(line) < spans[-1][0] and not line[:spans[0][1]].strip():
                break
            rows.append(cells(line))
        out.append((cells(lines[i - 1]), rows))
    return out


def md_tables(s: str) -> list[tuple[list[str], list[list[str]]]]:
    out, block = [], []
    for line in s.splitlines() + [""]:
        if line.startswith("|"):
            block.append([re.sub(r"\\(.)", r"\1", c.strip()) for c in re.split(r"(?<!\\)\|", line)[1:-1]])
        elif block:
            out.append((block[0], [r for r in block[2:]]))
            block = []
    return out


class _Html(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self.text, self._cell, self._skip = [], [], None, 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "table":
            self.tables.append(([], []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag in ("td", "th") and self._cell is not None:
            val = "".join(self._cell).strip()
            if tag == "th":
                self.tables[-1][0].append(val)
            else:
                self.tables[-1][1][-1].append(val)
            self._cell = None

    def handle_data(self, data):
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def html_view(page: str) -> tuple[str, list]:
    p = _Html()
    p.feed(page)
    return " ".join(p.text), [(h, [r for r in rows if r]) for h, rows in p.tables]


def _views():
    """(id, visible text, tables) of every report of the set, in every format."""
    for name in ANALYZE:
        yield f"analyze-{name}-text", "text"
        yield f"analyze-{name}-markdown", "markdown"
        yield f"analyze-{name}-html", "html"
    for name in DIFFS:
        yield f"diff-{name}-text", "text"
        yield f"diff-{name}-markdown", "markdown"
        yield f"diff-{name}-html", "html"


def render_view(view_id: str):
    kind, name, fmt = view_id.split("-")
    if kind == "analyze":
        doc = _analyze_doc(name)
        out = {"text": text.render, "markdown": markdown.render, "html": html.render}[fmt](doc)
    else:
        doc = _diff_doc(name)
        out = {"text": diff_text.render, "markdown": diff_markdown.render, "html": html.render_diff_html}[fmt](doc)
    if fmt == "html":
        return html_view(out)
    return out, (text_tables(out) if fmt == "text" else md_tables(out))


@pytest.mark.parametrize("view_id", [v for v, _ in _views()])
def test_people_words_only(view_id):
    visible, tables = render_view(view_id)
    assert tables, "no table found: the parser is broken"
    raw = sorted({m.group(0) for m in RAW_NS.finditer(visible)})
    assert not raw, f"raw keys on screen: {raw}"
    dump = DICT_DUMP.search(visible)
    assert dump is None, f"dict dump on screen: {visible[max(0, dump.start() - 60):dump.end() + 60]!r}"
    for headers, rows in tables:
        keys = [h for h in headers if RAW_KEY.search(h)]
        assert not keys, f"raw keys as column names: {keys}"
        for i, head in enumerate(headers):
            if not COUNT_HEADERS.search(head):
                continue
            for r in rows:
                if i < len(r) and r[i]:
                    assert COUNT_CELL.match(r[i]), f"column {head!r}: {r[i]!r} is not a whole count"


def test_count_checks_can_fail():
    """Control: the detectors catch what they are for."""
    assert RAW_NS.search("compute_ns  12.0") and not RAW_NS.search("12.000 ns and 3 ms")
    assert DICT_DUMP.search("delta_parts {'compute_ns': 1}") and DICT_DUMP.search('{"a": 1}')
    assert DICT_DUMP.search("{kind: all_to_all}") and not DICT_DUMP.search("collective: (kind: a2a)")
    assert not COUNT_CELL.match("302.33") and not COUNT_CELL.match("0 -> 302.33")
    assert COUNT_CELL.match("~302") and COUNT_CELL.match("1,024 → <1")
    assert all(RAW_KEY.search(h) for h in ("base_count", "times_last", "delta_parts ms", "wait_caused ms"))
    assert not any(RAW_KEY.search(h) for h in ("calls per step", "wait caused (ms)", "exposed memory"))
    heads, rows = text_tables("t\na  count\n-  -----\nx  0.5\n")[0]
    assert heads == ["a", "count"] and rows == [["x", "0.5"]]


# --- layer and stage tables add up ------------------------------------------------------------------

def _units(cell: str) -> int:
    return round(float(cell.replace(",", "")) * 1000)


def _layer_expectations(doc: dict) -> tuple[dict, dict]:
    """Per (label, phase) and per stage: the mean per rank-step window of each part (ns), from the
    document's rows by plain sums."""
    n = max(1, len(doc["steps"]))
    groups, stages = {}, {}
    for r in doc.get("layers") or []:
        if r["region"] == "layer":
            label = f"layer {r['layer']}" + (" (inferred)" if r.get("layer_inferred") else "")
        else:
            label = {"outside": "outside layers", "layer_unknown": "layer unknown"}.get(r["region"], "unattributed")
        g = groups.setdefault((label, r["phase"]), [0, 0, 0, 0, 0])
        for i, k in enumerate(("step_time_ns", "compute_ns", "exposed_comm_ns", "exposed_memory_ns", "idle_ns")):
            g[i] += r[k] / n
    for s in doc.get("stages") or []:
        stages[s["stage"]] = [s[k] / n for k in ("step_time_ns", "compute_ns", "exposed_comm_ns",
                                                  "exposed_memory_ns", "idle_ns")]
    return groups, stages


def _check_part_table(headers, rows, expect, key_cols):
    idx = [headers.index(h) for h in ("total", "compute")]
    part_cols = [idx[1] + k for k in range(4)]
    short = {"exp comm": "exposed comm", "exp mem": "exposed memory"}
    assert [short.get(headers[i], headers[i]) for i in part_cols] == \
        ["compute", "exposed comm", "exposed memory", "idle"], headers
    seen = 0
    for r in rows:
        if not r[0]:
            continue
        total = _units(r[idx[0]])
        assert total == sum(_units(r[i]) for i in part_cols), f"row {r} does not add up"
        key = tuple(r[:key_cols]) if key_cols > 1 else r[0]
        exp = expect[key]
        assert abs(total - exp[0] / 1000) <= 0.5 + 1e-6, (r, exp)
        for i, e in zip(part_cols, exp[1:], strict=True):
            assert abs(_units(r[i]) - e / 1000) <= 1.0 + 1e-6, (r, exp)   # parts rounded to the total: +-1 us
        seen += 1
    return seen


@pytest.mark.parametrize("name", ["h200_overlap", "dlrm_8rank", "nsys_h100_a2a", "moe_b300"])
@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_layer_and_stage_tables_add_up(name, fmt):
    doc = _analyze_doc(name)
    if not doc.get("layers"):
        pytest.skip("no layer attribution in this trace")
    groups, stages = _layer_expectations(doc)
    _, tables = render_view(f"analyze-{name}-{fmt}")
    layer_t = [t for t in tables if t[0][:3] == ["layer", "phase", "total"]]
    stage_t = [t for t in tables if t[0][:2] == ["stage", "total"]]
    assert len(layer_t) == 1 and len(stage_t) == 1
    assert _check_part_table(*layer_t[0], groups, 2) == len(groups)
    assert _check_part_table(*stage_t[0], stages, 1) == len(stages)
    # overlapped comm is a separate measure, after the parts
    assert layer_t[0][0].index("total") < layer_t[0][0].index("idle") < [
        i for i, h in enumerate(layer_t[0][0]) if "ovl" in h or "overlapped" in h][0]


def test_schema_says_what_each_aggregate_is():
    """The JSON fields the reports aggregate say in their schema description which aggregate they are."""
    from reports_support import schema
    rep, diff = schema("report.schema.json"), schema("diff.schema.json")
    fields = {"summary": rep["properties"]["summary"], "per_rank": rep["properties"]["per_rank"],
              "layers": rep["properties"]["layers"], "stages": rep["properties"]["stages"],
              "comm": rep["properties"]["comm"], "top_kernels": rep["properties"]["top_kernels"],
              "by_group": rep["properties"]["flops"]["properties"]["by_group"],
              "critical_path": rep["properties"]["critical_path"],
              "diff breakdown": diff["$defs"]["side"]["properties"]["breakdown"],
              "diff family count": diff["$defs"]["family"]["properties"]["base_count"],
              "diff comm": diff["properties"]["delta"]["properties"]["comm"]}
    for name, node in fields.items():
        assert re.search(r"\b(median|means?|totals?|one step window|one entry per)\b",
                         node.get("description", "")), name
    parts = rep["$defs"]["breakdown"]["properties"]
    assert all("part of the step" in parts[k]["description"] for k in ("compute_ns", "exposed_comm_ns",
                                                                         "exposed_memory_ns", "idle_ns"))
    assert "not a part" in parts["overlapped_comm_ns"]["description"]


def test_stall_evidence_wraps_instead_of_being_cut():
    """A long evidence line is wrapped onto continuation rows of the text table (every word kept,
    none cut), and kept whole in Markdown and HTML."""
    import copy
    doc = copy.deepcopy(_analyze_doc("h200_overlap"))
    top = max(doc["stalls"], key=lambda s: s["dur_ns"])
    top["cause"] = "exposed_a2a"
    top["evidence"] = {"comm_dur_ns": 962_000, "hidden_ns": 715_000, "independent_work_available": True,
                       "independent_work_ns": 3_000_000, "independent_stages": ["shared_expert", "attention", "router"]}
    expected = "0.962 ms long, 0.715 ms hidden; 3.000 ms independent work (shared_expert, attention, router)"
    tables = [t for t in text_tables(text.render(doc)) if t[0][-1] == "evidence"]
    assert len(tables) == 1
    headers, rows = tables[0]
    i = [k for k, r in enumerate(rows) if r[3] == "exposed_a2a"][0]
    cells = [rows[i][-1]]
    for r in rows[i + 1:]:
        if any(r[:-1]):
            break
        cells.append(r[-1])                 # continuation rows: only the evidence column
    assert len(cells) > 1 and all(len(c) <= 44 for c in cells)
    assert " ".join(cells) == expected
    md_rows = [t for t in md_tables(markdown.render(doc)) if t[0][-1] == "evidence"][0][1]
    assert any("independent work: 3.000 ms" in r[-1] and "…" not in r[-1] for r in md_rows)


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_diff_stage_and_layer_changes_split_into_every_part(fmt):
    """Diff stage and layer tables carry the change of each of the four parts; the printed parts add
    up to the printed change (each rounded to the µs: within 2 µs), and the change is new - base."""
    _, tables = render_view(f"diff-h200_blocking_vs_overlap-{fmt}")
    split = [(h, rows) for h, rows in tables if any(x.startswith("change") for x in h) and len(h) >= 8]
    assert len(split) == 2, [h for h, _ in tables]             # stages, layers
    for headers, rows in split:
        c = next(i for i, x in enumerate(headers) if x.startswith("change"))
        assert [re.sub(r"^change: | ms$", "", x) for x in headers[c + 1:c + 5]] in (
            ["compute", "exposed comm", "exposed memory", "idle"], ["compute", "exp comm", "exp mem", "idle"])
        assert rows
        for r in rows:
            change = _units(r[c])
            assert abs(change - sum(_units(x) for x in r[c + 1:c + 5])) <= 2, r
            assert abs(change - (_units(r[c - 1]) - _units(r[c - 2]))) <= 1, r
