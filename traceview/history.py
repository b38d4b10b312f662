"""Nightly history: the headline metrics of successive `traceview analyze` JSON reports, and the
nights where a metric left the noise band of the nights before it.

Order. Nights are ordered by the capture time each report records (the earliest
`inputs[].capture_epoch_ns`), never by file names or file times; equal capture times keep the
order of their paths.

Metrics (per night, from the report, never re-measured): step time (ms, `summary.step_time_ns`),
delivered TFLOP/s per GPU (`flops.delivered_tflops_per_gpu`), MFU (%, `flops.mfu`), exposed
communication (ms, `summary.exposed_comm_ns`) and the time of each MoE stage per step (ms,
`stages[].step_time_ns` over the report's rank-step windows). A metric a report lacks is null
for that night and skipped by the rule.

Change-point rule, per metric (`Rule`): the baseline of night n is the median of the at most
`window` previous nights (that have the metric) of its current regime, and the noise band around it is
max(k × 1.4826 × MAD, min_band_pct % of the median) (MAD: the median absolute deviation of
those nights; 1.4826 × MAD estimates the standard deviation of normal noise). Night n is a change
when its value lies outside the band; a new regime then starts at night n, so a step change is
reported once, on the night it happened, and the nights after it are compared with the new level.
A night is only judged when its regime has at least `min_nights` earlier nights.
"""
from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import msgspec

from . import __version__
from .errors import TraceError, UsageError

SCHEMA = "traceview.history/1"
REPORT_SCHEMA = "traceview.report/1"
SKIPPED_IN_DIRS = ("traceview.diff/", "traceview.history/")   # siblings of reports in artifact folders
MAD_TO_SIGMA = 1.4826
STAGE_ORDER = ("attention", "router", "dispatch", "experts", "shared_expert", "combine", "other")


@dataclass(frozen=True)
class Rule:
    window: int = 28           # previous nights in the baseline
    k: float = 4.5             # band half-width in robust standard deviations
    min_band_pct: float = 3.0  # the band is never narrower than this % of the baseline
    min_nights: int = 7        # nights of the regime needed before a night is judged

    def check(self) -> None:
        if self.window < 2:
            raise UsageError(None, "--window must be at least 2")
        if not 2 <= self.min_nights <= self.window:
            raise UsageError(None, "--min-nights must be between 2 and --window")
        if not self.k > 0:
            raise UsageError(None, "--k must be positive")
        if not self.min_band_pct >= 0:
            raise UsageError(None, "--min-band must not be negative")

    def text(self) -> str:
        return (f"a night is a change when a metric lies outside median ± max({self.k:g} × 1.4826 × MAD, "
                f"{self.min_band_pct:g} % of the median) of the previous {self.window} nights of its regime "
                f"(at least {self.min_nights}); a change starts a new regime")


# --- reading reports (typed decoding: only the fields used are built) ---------------------------

class _Summary(msgspec.Struct):
    step_time_ns: float
    exposed_comm_ns: float


class _Flops(msgspec.Struct):
    delivered_tflops_per_gpu: Optional[float] = None
    mfu: Optional[float] = None


class _Stage(msgspec.Struct):
    stage: str
    step_time_ns: float


class _Input(msgspec.Struct):
    file: str
    capture_epoch_ns: Optional[int] = None
    capture_time: Optional[str] = None


class _Schema(msgspec.Struct):
    schema: Any = None


class _Report(msgspec.Struct):
    schema: str
    summary: _Summary
    inputs: list[_Input]
    steps: list[msgspec.Raw]
    flops: Optional[_Flops] = None
    stages: Optional[list[_Stage]] = None


_SCHEMA_DEC = msgspec.json.Decoder(_Schema)
_REPORT_DEC = msgspec.json.Decoder(_Report)


@dataclass
class Night:
    path: str            # as shown: relative to the folder given, or the path given
    capture_ns: int
    capture_time: str
    values: dict


def expand(paths: list[str | Path]) -> list[tuple[Path, str, bool]]:
    """(file, shown name, found in a directory) for every JSON file given or under a folder given."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            try:
                found = sorted(q for q in p.rglob("*.json") if q.is_file())
            except OSError as e:
                raise TraceError(getattr(e, "filename", None) or p, f"cannot list ({e.strerror or e})") from e
            # names relative to the folder, unless several paths were given (they could collide)
            out += [(q, str(q.relative_to(p)) if len(paths) == 1 else str(q), True) for q in found]
        elif p.exists():
            out.append((p, str(p), False))
        else:
            raise TraceError(p, "no such file or directory")
    if not out:
        raise UsageError(paths[0] if paths else None, "no JSON reports found")
    return out


def read_night(path: Path, shown: str, in_dir: bool) -> Night | None:
    """One report as a Night; None for a diff/history document found in a folder; TraceError for
    an unreadable file, another schema, or a report without a capture time."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TraceError(path, f"cannot read ({e.strerror or e})") from e
    problem: Exception | None = None
    doc: _Report | None
    try:
        doc = _REPORT_DEC.decode(raw)
        schema = doc.schema
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        doc, problem = None, e
        try:
            schema = _SCHEMA_DEC.decode(raw).schema
        except (msgspec.DecodeError, msgspec.ValidationError) as e2:
            raise TraceError(path, f"not a JSON report ({_short(e2)})") from e2
    if schema != REPORT_SCHEMA:
        if in_dir and isinstance(schema, str) and schema.startswith(SKIPPED_IN_DIRS):
            return None
        raise TraceError(path, f"not a traceview report: schema {_clip(schema)} (expected {REPORT_SCHEMA})")
    if doc is None or problem is not None:   # both or neither
        raise TraceError(path, f"broken {REPORT_SCHEMA} report ({_short(problem)})") from problem
    caps = [i.capture_epoch_ns for i in doc.inputs if i.capture_epoch_ns is not None]
    if not caps:
        raise TraceError(path, "the report records no capture time (inputs[].capture_epoch_ns; written by an older "
                               "traceview: rerun `traceview analyze -f json`)")
    first = min(caps)
    cap_text = next((i.capture_time for i in doc.inputs if i.capture_epoch_ns == first and i.capture_time), None)
    from .analysis.capture import utc_text
    return Night(shown, first, cap_text or utc_text(first), metrics(doc))


def _short(e: Exception | None) -> str:
    return _clip(str(e).splitlines()[0] if str(e) else type(e).__name__, 160)


def _clip(v, n: int = 60) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def metrics(doc: _Report) -> dict:
    """The night's values: {metric key: number or None}."""
    n = max(1, len(doc.steps))
    f = doc.flops or _Flops()
    vals = {
        "step_time_ms": doc.summary.step_time_ns / 1e6,
        "tflops_per_gpu": f.delivered_tflops_per_gpu,
        "mfu_pct": None if f.mfu is None else 100.0 * f.mfu,
        "exposed_comm_ms": doc.summary.exposed_comm_ns / 1e6,
    }
    for s in doc.stages or []:
        vals[f"stage:{s.stage}"] = s.step_time_ns / n / 1e6
    return vals


# --- metrics and the rule ----------------------------------------------------------------------

BASE_METRICS = (
    ("step_time_ms", "step time", "ms", "lower"),
    ("tflops_per_gpu", "delivered TFLOP/s per GPU", "TFLOP/s", "higher"),
    ("mfu_pct", "MFU", "%", "higher"),
    ("exposed_comm_ms", "exposed communication", "ms", "lower"),
)


def metric_list(nights: list[Night]) -> list[dict]:
    """The metrics present in at least one night: the four headline ones, then stages in order."""
    present: set[str] = set()
    for n in nights:
        present.update(k for k, v in n.values.items() if v is not None)
    out = [{"key": k, "label": lab, "unit": u, "better": b} for k, lab, u, b in BASE_METRICS if k in present]
    stages = sorted((k for k in present if k.startswith("stage:")),
                    key=lambda k: (STAGE_ORDER.index(k[6:]) if k[6:] in STAGE_ORDER else len(STAGE_ORDER), k))
    out += [{"key": k, "label": f"stage {k[6:]}", "unit": "ms", "better": "lower"} for k in stages]
    return out


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def judge(series: list[float | None], rule: Rule) -> tuple[list[dict], list[tuple[float, float] | None]]:
    """The changes [{index, from, to, band}] and, per night, the (baseline, band half-width) it was
    judged against (None for a night not judged: no value, or too few nights in its regime)."""
    out: list[dict] = []
    bands: list[tuple[float, float] | None] = [None] * len(series)
    seen: list[float] = []         # the values of the current regime so far (nights with the metric)
    for i, x in enumerate(series):
        if x is None:
            continue
        prev = seen[-rule.window:]
        if len(prev) >= rule.min_nights:
            med = _median(prev)
            mad = _median([abs(v - med) for v in prev])
            band = max(rule.k * MAD_TO_SIGMA * mad, rule.min_band_pct / 100.0 * abs(med))
            bands[i] = (med, band)
            if abs(x - med) > band:
                out.append({"index": i, "from": med, "to": x, "band": band})
                seen = []          # a new regime starts at this night
        seen.append(x)
    return out, bands


def change_points(series: list[float | None], rule: Rule) -> list[dict]:
    """[{index, from, to, band}] of the nights outside the band of their regime's previous nights."""
    return judge(series, rule)[0]


def build(paths: list[str | Path], rule: Rule | None = None) -> dict:
    """The `traceview.history/1` document for the reports at `paths` (files or folders)."""
    rule = rule or Rule()
    rule.check()
    nights, skipped = [], []
    for path, shown, in_dir in expand(paths):
        night = read_night(path, shown, in_dir)
        if night is None:
            skipped.append(shown)
        else:
            nights.append(night)
    if not nights:
        raise UsageError(paths[0], "no traceview.report/1 documents found (only diff/history documents)")
    nights.sort(key=lambda n: (n.capture_ns, n.path))
    warnings = []
    if skipped:
        warnings.append(f"{len(skipped)} diff/history document(s) in the folder(s) skipped")
    same = sum(1 for a, b in itertools.pairwise(nights) if a.capture_ns == b.capture_ns)
    if same:
        warnings.append(f"{same} report(s) have the capture time of the report before them (the same run twice?)")
    mlist = metric_list(nights)
    changes = []
    night_bands: list[dict] = [{} for _ in nights]
    for m in mlist:
        series = [n.values.get(m["key"]) for n in nights]
        found, bands = judge(series, rule)
        for i, b in enumerate(bands):
            night_bands[i][m["key"]] = None if b is None else [b[0] - b[1], b[0] + b[1]]
        for c in found:
            n = nights[c["index"]]
            rising = c["to"] > c["from"]
            worse = rising == (m["better"] == "lower")
            changes.append({
                "night": c["index"] + 1, "file": n.path, "capture_time": n.capture_time,
                "metric": m["key"], "label": m["label"], "unit": m["unit"],
                "from": c["from"], "to": c["to"], "band": c["band"],
                "pct": None if c["from"] == 0 else 100.0 * (c["to"] - c["from"]) / abs(c["from"]),
                "kind": "regression" if worse else "improvement",
            })
    order = {m["key"]: i for i, m in enumerate(mlist)}
    changes.sort(key=lambda c: (c["night"], order[c["metric"]]))
    by_night: dict[int, list[str]] = {}
    for c in changes:
        by_night.setdefault(c["night"], []).append(c["metric"])
    latest = None
    if len(nights) >= 2:
        before, last = nights[-2], nights[-1]
        latest = {"night": len(nights), "previous": len(nights) - 1, "deltas": [
            {"metric": m["key"], "label": m["label"], "unit": m["unit"], "from": before.values.get(m["key"]),
             "to": last.values.get(m["key"]),
             "pct": _pct(before.values.get(m["key"]), last.values.get(m["key"]))}
            for m in mlist]}
    return {
        "schema": SCHEMA,
        "tool": {"name": "traceview", "version": __version__},
        "rule": {**asdict(rule), "text": rule.text()},
        "metrics": mlist,
        "nights": [{"night": i + 1, "file": n.path, "capture_time": n.capture_time, "capture_epoch_ns": n.capture_ns,
                    "values": {m["key"]: n.values.get(m["key"]) for m in mlist},
                    "bands": night_bands[i],
                    "changed": by_night.get(i + 1, [])}
                   for i, n in enumerate(nights)],
        "changes": changes,
        "latest": latest,
        "warnings": warnings,
    }


def _pct(a, b):
    return None if a is None or b is None or a == 0 else 100.0 * (b - a) / abs(a)


def failing(doc: dict, last: int, regressions_only: bool = False) -> list[dict]:
    """The changes on the newest `last` nights (what --fail-on-change / --fail-on-regression fail on)."""
    n = len(doc["nights"])
    return [c for c in doc["changes"] if c["night"] > n - last and (c["kind"] == "regression" or not regressions_only)]
