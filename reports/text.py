"""Terminal report: readable tables that fit 100 columns."""
from __future__ import annotations

BREAKDOWN = (("compute", "compute_ns"), ("exposed comm", "exposed_comm_ns"),
             ("exposed memory", "exposed_memory_ns"), ("idle", "idle_ns"))


def ms(ns: int | float) -> str:
    return f"{ns / 1e6:,.3f}"


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "   - "


def clip(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def table(headers: list[str], rows: list[list], aligns: str | None = None) -> list[str]:
    cols = [[str(h)] + [str(r[i]) for r in rows] for i, h in enumerate(headers)]
    widths = [max(len(c) for c in col) for col in cols]
    aligns = aligns or "l" + "r" * (len(headers) - 1)

    def fmt(vals):
        return "  ".join(v.ljust(w) if a == "l" else v.rjust(w) for v, w, a in zip(vals, widths, aligns)).rstrip()

    out = [fmt([str(h) for h in headers]), fmt(["-" * w for w in widths])]
    out += [fmt([str(v) for v in r]) for r in rows]
    return out


def breakdown_lines(doc: dict) -> list[str]:
    lines = []
    for r in doc["per_rank"]:
        st = r["step_time_ns"]
        lines.append(f"rank {r['rank']}: median step {ms(st)} ms over {r['steps']} step(s); "
                     f"overlap ratio {100 * r['overlap_ratio']:.1f}% (overlapped / total comm)")
        rows = [[name, ms(r[key]), pct(r[key], st)] for name, key in BREAKDOWN]
        rows.append(["overlapped comm", ms(r["overlapped_comm_ns"]), pct(r["overlapped_comm_ns"], st)])
        rows.append(["total comm", ms(r["comm_ns"]), pct(r["comm_ns"], st)])
        lines += ["  " + x for x in table(["part", "ms", "% step"], rows)]
        lines.append("")
    return lines


def top_kernel_lines(doc: dict) -> list[str]:
    rows = [[clip(k["name"], 60), k["class"], k["count"], ms(k["total_ns"])] for k in doc["top_kernels"]]
    return ["Top kernels by GPU time (all ranks, inside step windows)"] + table(
        ["kernel", "class", "count", "ms"], rows, "llrr") + [""]


def render(doc: dict) -> str:
    s = doc["summary"]
    head = [f"traceview {doc['tool']['version']} — {len(doc['inputs'])} input(s), "
            f"{s['ranks']} rank(s), {s['steps']} step(s); steps: {doc['steps_source']}"]
    for i in doc["inputs"][:8]:
        head.append(f"  rank {i['rank']}: {clip(i['file'], 50)} ({i['format']}, {i['gpu'] or 'GPU unknown'})")
    if len(doc["inputs"]) > 8:
        head.append(f"  ... and {len(doc['inputs']) - 8} more")
    head.append("")
    lines = head + breakdown_lines(doc) + top_kernel_lines(doc)
    for extra in doc.get("_text_sections", []):
        lines += extra
    for w in doc.get("warnings", []):
        lines.append(f"warning: {clip(w, 200)}")
    return "\n".join(lines).rstrip() + "\n"
