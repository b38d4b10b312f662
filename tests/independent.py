"""A second, independent computation of the step breakdown straight from a Kineto JSON file.

It shares no code with traceview: plain json parsing, collective detection by time containment
of the launch call in a collective CPU range, and interval-union algebra (merge, intersect)
instead of the SQL sweep line.
"""
from __future__ import annotations

import gzip
import json
import re

COLL_OP = re.compile(r"^(c10d::|nccl:|gloo:|record_param_comms$)")
COLL_KERNEL = re.compile(r"(?i)nccl|rccl|dpsk::ep|deep_ep|nvshmem")


def union(iv):
    out = []
    for s, e in sorted(iv):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(iv):
    return sum(e - s for s, e in iv)


def intersect(a, b):
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def clip(iv, lo, hi):
    return [[max(s, lo), min(e, hi)] for s, e in iv if e > lo and s < hi]


def breakdown(path, step_prefix="ProfilerStep#"):
    with gzip.open(path) if str(path).endswith(".gz") else open(path, "rb") as fh:
        events = json.load(fh)["traceEvents"]
    us = lambda v: round(v * 1000)  # noqa: E731  µs -> ns
    steps, colls, launches, gpu = [], [], {}, []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        s, d = us(e["ts"]), us(e.get("dur", 0))
        if cat == "user_annotation" and e["name"].startswith(step_prefix):
            steps.append((int(e["name"][len(step_prefix):]), s, s + d))
        if cat in ("cpu_op", "user_annotation") and COLL_OP.match(e["name"]):
            colls.append((e["tid"], s, s + d))
        if cat in ("cuda_runtime", "cuda_driver"):
            launches[e["args"]["correlation"]] = (e["tid"], s, s + d)
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu.append((cat, e["name"], e["args"].get("correlation"), s, s + d))
    result = {}
    for n, cs, ce in sorted(steps):
        mine = []
        for cat, name, corr, s, e in gpu:
            tid, ls, le = launches.get(corr, (None, None, None))
            if ls is None or not (cs <= ls < ce):
                continue
            comm = bool(COLL_KERNEL.search(name)) or any(t == tid and a <= ls and le <= b for t, a, b in colls)
            klass = "comm" if comm else ("memory" if cat != "kernel" else "compute")
            mine.append((klass, s, e))
        lo, hi = min(s for _, s, _ in mine), max(e for _, _, e in mine)
        comp = union([[s, e] for k, s, e in mine if k == "compute"])
        comm = union([[s, e] for k, s, e in mine if k == "comm"])
        mem = union([[s, e] for k, s, e in mine if k == "memory"])
        comp, comm, mem = clip(comp, lo, hi), clip(comm, lo, hi), clip(mem, lo, hi)
        busy = union(comp + comm + mem)
        overlapped = length(intersect(comm, comp))
        comm_or_comp = union(comp + comm)
        result[n] = dict(step_time_ns=hi - lo, compute_ns=length(comp), comm_ns=length(comm),
                         overlapped_comm_ns=overlapped, exposed_comm_ns=length(comm) - overlapped,
                         exposed_memory_ns=length(busy) - length(comm_or_comp), idle_ns=(hi - lo) - length(busy))
    return result


BREAKDOWN_FIELDS = ("compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns", "idle_ns", "comm_ns")


def assert_steps_match(doc: dict, ref: dict, steps: list[int], tol: float = 0.001) -> None:
    """traceview's per-step breakdown (doc["steps"]) against this module's, each part within
    tol x the step's window."""
    got = {s["step"]: s for s in doc["steps"]}
    assert sorted(got) == sorted(ref) == steps
    for n, r in ref.items():
        window = r["step_time_ns"]
        assert abs(got[n]["step_time_ns"] - window) <= tol * window
        for f in BREAKDOWN_FIELDS:
            assert abs(got[n][f] - r[f]) <= tol * window, (n, f, got[n][f], r[f])
