"""Make a larger Kineto trace by replicating a real one's steps end to end.

    python bench/replicate.py SRC.json.gz FACTOR DST.json.gz

Copy k (0 <= k < FACTOR) of every event is shifted by k x (the trace's span + 1 ms); the ids that link
events (External id, correlation, Sequence number, flow ids) are offset per copy so links stay within a
copy, and `ProfilerStep#N` becomes `ProfilerStep#(N + k x steps)`. Metadata events (ph M) are kept once.
The result is what a longer capture of the same job looks like: FACTOR x the steps, FACTOR x the events.
"""
from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

ID_ARGS = ("External id", "correlation", "Sequence number", "Record function id")
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        return json.load(fh)


def replicate(src: Path, factor: int, dst: Path, level: int = 6) -> dict:
    """Write the replicated trace to dst; returns counts (events, gpu activities, steps)."""
    doc = _load(src)
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    shift = (max(ends) - min(ts)) + 1000.0
    top = {k: 0 for k in ID_ARGS}
    flow_top = 0
    steps = 0
    for e in events:
        for k, v in (e.get("args") or {}).items():
            if k in top and isinstance(v, int):
                top[k] = max(top[k], v)
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
            flow_top = max(flow_top, e["id"])
        m = STEP.match(str(e.get("name", "")))
        if m:
            steps = max(steps, int(m.group(1)))
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    n_gpu = sum(1 for e in body if e.get("cat") in gpu_cats) * factor
    dst.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps(doc)[:-1]  # without the closing brace
    with gzip.open(dst, "wt", encoding="utf-8", compresslevel=level) as out:
        out.write(head + ', "traceEvents": [\n')
        first = True
        for e in meta:
            out.write(("" if first else ",\n") + json.dumps(e))
            first = False
        for k in range(factor):
            for e in body:
                c = dict(e)
                c["ts"] = round(e["ts"] + k * shift, 3)
                if k:
                    args = e.get("args")
                    if args:
                        args = dict(args)
                        for key in ID_ARGS:
                            if isinstance(args.get(key), int) and args[key] > 0:
                                args[key] += k * (top[key] + 1)
                        c["args"] = args
                    if c.get("ph") in ("s", "f", "t") and isinstance(c.get("id"), int):
                        c["id"] += k * (flow_top + 1)
                    m = STEP.match(str(c.get("name", "")))
                    if m:
                        c["name"] = f"ProfilerStep#{int(m.group(1)) + k * steps}"
                out.write(("" if first else ",\n") + json.dumps(c))
                first = False
        out.write("\n]}\n")
    return {"events": len(meta) + len(body) * factor, "gpu_activities": n_gpu, "steps": steps * factor}


if __name__ == "__main__":
    print(replicate(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])))
