"""Group the exact unit deltas (decompose.py) into causes a person can act on, ranked.

Every unit delta (group × kernel family × part) is assigned to exactly one cause, so the items'
contributions sum to the step-time change; what is not listed (small items, rounding) is the
remainder line. Assignment, in order:

1. straggler: when the per-rank communication time changed unevenly across ranks (the ranks
   that wait grow, the late rank does not; or a `stalls` section names peer_wait/imbalance),
   all comm-class units (exposed comm and the idle charged to comm kernels) go to
   "rank R is late to the collectives".
2. host sync: a (layer, phase, stage) whose count of host synchronizations
   (cudaStreamSynchronize/cudaDeviceSynchronize/cudaEventSynchronize) changed: its idle and
   exposed-memory units go to "new host sync in ..." (or "host sync removed").
3. kernel swap: in a group where a family vanished and another of the same category appeared
   (GEMM nvjet bf16 -> sgemm fp32), all units of both families go to that swap, merged over
   layers and phases of the same stage.
4. other compute units: "<family> kernels in <stage> slower/faster"; comm units: "<kind> in
   <stage> exposed a -> b"; memory units: "exposed <memcpy> in <stage>".
5. idle not assigned above is pooled: idle that shrank goes to the causes whose kernels grew
   ("filled idle time"), idle that grew to host-sync/straggler causes (the GPU drains after a
   sync); what has no such cause stays its own item ("GPU idle grew ...: host-/launch-bound",
   named from the `stalls` section when present).

A cause whose net contribution is small against its gross movement is marked `moved` (time
moved between categories, the step did not change).
"""
from __future__ import annotations

from .decompose import PARTS, Side, Unit, Where, unit_deltas
from .texts import describe
from .words import fmt_ns

SYNC_EPS = 0.25          # a change in host syncs per step counts when |Δn| >= this


class Cause:
    def __init__(self, kind: str, key: tuple, **info):
        self.kind, self.key, self.info = kind, key, info
        # a straggler is keyed by its rank; every other cause by (stage, region, ...)
        self.rank: int | None = key[0] if kind == "straggler" else None
        self.stage: str | None = None if kind == "straggler" else key[0]
        self.region: str | None = None if kind == "straggler" else key[1]
        self.parts = {p: 0.0 for p in PARTS}
        self.overlapped = 0.0
        self.base = {p: 0.0 for p in PARTS + ("overlapped_comm_ns", "busy_ns", "count")}
        self.new = dict(self.base)
        self.layers: set = set()
        self.phases: set = set()
        self.filled_idle = 0.0      # idle pooled in (negative: idle this cause filled)
        self.added_idle = 0.0
        self.gross = 0.0

    def add(self, key: Unit, d: dict, parts=PARTS, with_extra: bool = True) -> None:
        layer, phase = key.layer, key.phase
        moved = 0.0
        for p in parts:
            self.parts[p] += d[p]
            moved += abs(d[p])
            if with_extra:
                self.base[p] += d["base"].get(p, 0.0)
                self.new[p] += d["new"].get(p, 0.0)
        if with_extra:
            self.overlapped += d["overlapped_comm_ns"]
            for p in ("overlapped_comm_ns", "busy_ns", "count"):
                self.base[p] += d["base"].get(p, 0.0)
                self.new[p] += d["new"].get(p, 0.0)
        self.gross += moved
        if moved > 0:
            self.layers.add(layer)
            self.phases.add(phase)

    @property
    def contribution(self) -> float:
        return sum(self.parts.values())


def moved_between_categories(c, moved_min_ns: float) -> bool:
    """Time moved between categories (compute vs idle, comm vs idle...) with little net effect:
    both the growing and the shrinking parts are large and the net is small against them."""
    pos = sum(v for v in c.parts.values() if v > 0)
    neg = -sum(v for v in c.parts.values() if v < 0)
    return min(pos, neg) >= moved_min_ns / 2 and abs(c.contribution) < 0.25 * max(pos, neg)


def detect_straggler(base: Side, new: Side, dT: float, threshold: float) -> dict | None:
    """Uneven change of per-rank comm time: the waiting ranks' comm grows, the late rank's not."""
    bs, ns_ = base.doc.get("stragglers"), new.doc.get("stragglers")
    if isinstance(ns_, list) and ns_:
        nsteps = max(1, new.doc["summary"].get("steps", 1))
        bsteps = max(1, base.doc["summary"].get("steps", 1))
        bw = {x["rank"]: x.get("wait_caused_ns", 0) / bsteps for x in (bs or []) if isinstance(x, dict)}
        nw = {x["rank"]: x.get("wait_caused_ns", 0) / nsteps for x in ns_ if isinstance(x, dict)}
        growth = {r: nw.get(r, 0.0) - bw.get(r, 0.0) for r in set(bw) | set(nw)}
        if growth:
            r = max(growth, key=lambda k: (abs(growth[k]), -k))
            if abs(growth[r]) >= max(threshold, 0.25 * abs(dT)) and (growth[r] > 0) == (dT >= 0):
                return {"rank": r, "source": "collectives: the rank that arrives last (wait it causes per step)",
                        "comm_growth_ns": {k: v for k, v in sorted(growth.items())}, "wait": True}
    b = {r["rank"]: r["comm_ns"] for r in base.doc.get("per_rank", [])}
    n = {r["rank"]: r["comm_ns"] for r in new.doc.get("per_rank", [])}
    ranks = sorted(set(b) & set(n))
    if len(ranks) < 2:
        return None
    growth = {r: n[r] - b[r] for r in ranks}
    lo, hi = min(growth.values()), max(growth.values())
    if hi - lo < max(threshold, 0.25 * abs(dT)):
        return None
    # slower: the late rank is the one whose comm grew least (it never waits); faster: the
    # base's late rank is the one whose comm shrank least
    rank = min(ranks, key=lambda r: (growth[r], r)) if dT >= 0 else max(ranks, key=lambda r: (growth[r], -r))
    return {"rank": rank, "source": "per-rank comm time", "comm_growth_ns": growth}


def _swaps(deltas: dict) -> dict:
    """Per group: {family: (old_family_keys, new_family_keys)} for category swaps."""
    groups: dict = {}
    for key, d in deltas.items():
        if key.cls != "compute":
            continue
        groups.setdefault(key.group, []).append((key.family, d["base"].get("count", 0.0), d["new"].get("count", 0.0)))
    out = {}
    for g, fams in groups.items():
        gone = [f for f, b, n in fams if b > 0 and n == 0]
        came = [f for f, b, n in fams if b == 0 and n > 0]
        for cat in {f.split(":")[0].split(" ")[0] for f in gone} & {f.split(":")[0].split(" ")[0] for f in came}:
            old = tuple(sorted(f for f in gone if f.split(":")[0].split(" ")[0] == cat))
            new = tuple(sorted(f for f in came if f.split(":")[0].split(" ")[0] == cat))
            for f in old + new:
                out[(g, f)] = (old, new)
    return out


def explain(base: Side, new: Side, threshold: float, top: int = 8,
            moved_min_ns: float | None = None) -> tuple[list[dict], dict]:
    """Returns (explanation items, details). Items' contribution_ns sum to ΔT exactly. A cause
    that moved at least `moved_min_ns` between categories with little net effect is listed
    (marked `moved`) even when its net contribution is small."""
    moved_min_ns = threshold if moved_min_ns is None else moved_min_ns
    dT = new.step_time_ns - base.step_time_ns
    deltas = unit_deltas(base, new)
    strag = detect_straggler(base, new, dT, threshold)
    swaps = _swaps(deltas)
    causes: dict = {}

    def cause(kind, key, **info) -> Cause:
        c = causes.get((kind,) + key)
        if c is None:
            c = causes[(kind,) + key] = Cause(kind, key, **info)
        return c

    def sync_change(g3) -> float:
        return new.syncs.get(g3, {}).get("n", 0.0) - base.syncs.get(g3, {}).get("n", 0.0)

    pool = []   # (unit key, idle delta)
    own_idle: dict = {}   # swap cause -> its units' idle deltas
    for key, d in deltas.items():
        layer, phase, stage, region, fam, cls = key
        g3 = Where(layer, phase, stage)
        if strag and cls == "comm":
            cause("straggler", (strag["rank"],)).add(key, d)
            continue
        ds = sync_change(g3)
        if abs(ds) >= SYNC_EPS and cls in ("memory",) and fam.startswith("memcpy:DtoH"):
            cause("host_sync", (stage, region), sign=1 if ds > 0 else -1).add(key, d)
            continue
        sw = swaps.get((key.group, fam))
        if sw:   # its own idle is settled below: a slower kernel fills idle, it never saves time
            c = cause("swap", (stage, region) + sw, old=sw[0], new=sw[1])
            c.add(key, d, parts=("compute_ns", "exposed_comm_ns", "exposed_memory_ns"))
            if d["idle_ns"]:
                own_idle.setdefault(id(c), (c, []))[1].append((key, d["idle_ns"]))
            continue
        if cls == "compute":
            cause("kernels", (stage, region, fam), family=fam).add(key, d, parts=("compute_ns",))
        elif cls == "comm":
            cause("comm", (stage, region, fam), ckind=fam.split(":", 1)[1]).add(
                key, d, parts=("exposed_comm_ns", "compute_ns", "exposed_memory_ns"))
        else:
            cause("memory", (stage, region, fam), family=fam).add(
                key, d, parts=("exposed_memory_ns", "compute_ns", "exposed_comm_ns"))
        if abs(ds) >= SYNC_EPS and (d["idle_ns"] > 0) == (ds > 0) and d["idle_ns"]:
            cause("host_sync", (stage, region), sign=1 if ds > 0 else -1).add(key, d, parts=("idle_ns",),
                                                                               with_extra=False)
        elif d["idle_ns"]:
            pool.append((key, d["idle_ns"]))

    # a swap keeps its own units' idle change, but no more of a shrink than its kernels grew (and
    # no more of a growth than they shrank): the rest is pooled, so its sign is that of its kernels
    for c, units in own_idle.values():
        tot = sum(v for _, v in units)
        comp = c.parts["compute_ns"]
        keep = max(tot, -comp) if comp > 0 and tot < 0 else min(tot, -comp) if comp < 0 and tot > 0 else tot
        c.parts["idle_ns"] += keep
        c.gross += abs(keep)
        if keep < 0:
            c.filled_idle += keep
        if tot and keep != tot:
            pool += [(k, v * (tot - keep) / tot) for k, v in units]

    # idle pool: shrink -> causes whose kernels grew (or a removed host sync); growth -> host
    # sync / straggler causes (or kernels that got faster: the GPU now waits instead)
    for sign in (-1, 1):
        amt = [(k, v) for k, v in pool if (v > 0) == (sign > 0)]
        if not amt:
            continue
        total = sum(v for _, v in amt)
        if sign < 0:
            cands = [c for c in causes.values() if c.kind in ("kernels", "swap") and c.parts["compute_ns"] > 0]
            cands += [c for c in causes.values() if c.kind == "host_sync" and c.info.get("sign", 1) < 0]
            if not cands:
                cands = [c for c in causes.values() if c.kind in ("straggler", "comm") and c.contribution < 0]
        else:
            cands = [c for c in causes.values() if c.kind in ("host_sync", "straggler") and c.contribution > 0]
            if not cands:
                cands = [c for c in causes.values() if c.kind in ("kernels", "swap") and c.parts["compute_ns"] < 0]
        # kernels can fill (or free) at most their own extra (saved) time; syncs/stragglers any
        caps = [max(0.0, abs(c.parts["compute_ns"]) - abs(c.parts["idle_ns"])) if c.kind in ("kernels", "swap")
                else float("inf") for c in cands]
        weights = [abs(c.parts["compute_ns"]) if c.kind in ("kernels", "swap") else abs(c.contribution)
                   for c in cands]
        left = total
        if cands and sum(weights) > 0:
            wsum = sum(weights)
            for c, w, cap in zip(cands, weights, caps, strict=False):
                share = sign * min(abs(total) * w / wsum, cap)
                left -= share
                c.parts["idle_ns"] += share
                c.gross += abs(share)
                if sign < 0:
                    c.filled_idle += share
                else:
                    c.added_idle += share
        if abs(left) > 1e-6:   # what no cause could take stays idle, per stage
            frac = left / total
            for k, v in amt:
                c = cause("idle", (k.stage, k.region))
                c.parts["idle_ns"] += v * frac
                c.gross += abs(v * frac)
                c.layers.add(k.layer)
                c.phases.add(k.phase)

    items = []
    for c in causes.values():
        if abs(c.contribution) < 1e-6 and c.gross < 1e-6:
            continue
        items.append({"kind": c.kind, "contribution_ns": c.contribution, "gross_ns": c.gross,
                      "parts_ns": {p: round(v) for p, v in c.parts.items()},
                      "layers": sorted(x for x in c.layers if x is not None),
                      "phases": sorted(x for x in c.phases if x),
                      "moved": moved_between_categories(c, moved_min_ns),
                      "text": describe(c, base, new, strag), "_cause": c})
    items.sort(key=lambda it: (-abs(it["contribution_ns"]), it["text"]))
    latent = latent_items(items, threshold)
    floor = max(0.005 * abs(dT), 1.0)
    kept = [it for it in items if abs(it["contribution_ns"]) >= floor or it["moved"]]
    kept = kept[:top]
    for it in kept:
        it.pop("_cause")
        it["contribution_ns"] = int(round(it["contribution_ns"]))
        it["gross_ns"] = int(round(it["gross_ns"]))
    rest = dT - sum(it["contribution_ns"] for it in kept)
    n_rest = len(items) - len(kept)
    if n_rest or abs(rest) >= 1:
        kept.append({"kind": "remainder", "contribution_ns": int(round(rest)), "gross_ns": int(round(abs(rest))),
                     "parts_ns": {}, "layers": [], "phases": [], "moved": False,
                     "text": f"{fmt_ns(rest)}: remainder ({n_rest} smaller changes and rounding)"})
    for it in kept:
        it["share"] = (it["contribution_ns"] / dT) if dT else None
    details = {"straggler": strag, "units": len(deltas), "latent": latent}
    return kept, details


GPU_PARTS = ("compute_ns", "exposed_comm_ns", "exposed_memory_ns")


def latent_items(items: list[dict], threshold: float) -> list[dict]:
    """Causes whose GPU work (compute + exposed comm + exposed memory, idle left out) grew: what
    each would add to the step once the host no longer hides it behind idle time. Positive cost,
    largest first; those below 1 % of the threshold (and of 1 ns) are left out."""
    out = []
    for it in items:
        c = it["_cause"]
        cost = sum(c.parts[p] for p in GPU_PARTS)
        if cost <= max(1.0, 0.01 * threshold):
            continue
        words = it["text"].split(": ", 1)[-1]
        out.append({"kind": c.kind, "cost_ns": int(round(cost)),
                    "parts_ns": {p: int(round(c.parts[p])) for p in GPU_PARTS},
                    "layers": it["layers"], "phases": it["phases"],
                    "text": f"{fmt_ns(cost)} of GPU time: {words}"})
    out.sort(key=lambda x: (-x["cost_ns"], x["text"]))
    return out
