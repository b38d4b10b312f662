"""The words of each explanation item (plain text; renderers escape it for their format)."""
from __future__ import annotations

from .words import cont, fmt_ns, ms, stall_status, where

_CAT_WORDS = {"gemm": "GEMMs", "attention": "attention kernels", "elementwise": "elementwise kernels",
              "conv": "convolutions", "norm": "norm kernels", "nccl": "NCCL kernels", "memcpy": "copies",
              "optimizer": "optimizer kernels", "softmax": "softmax kernels", "reduce": "reductions"}
_STAGE_WORDS = {"experts": "routed-expert", "shared_expert": "shared-expert", "attention": "attention",
                "router": "router", "dispatch": "dispatch", "combine": "combine"}


def _dtype(fam: str) -> str | None:
    parts = fam.split(" ")
    return parts[1] if len(parts) > 1 else None


def _cat(fam: str) -> str:
    return fam.split(" ")[0].split(":")[0]


def describe(c, base, new, strag) -> str:
    k = c.kind
    amount = fmt_ns(c.contribution)
    loc = where(c.layers, c.phases, c.stage, c.region)
    tail = ""
    idle, comp = c.parts["idle_ns"], c.parts["compute_ns"]
    if k in ("kernels", "swap") and comp > 0 and idle < 0:
        tail = f"; {fmt_ns(min(-idle, comp), signed=False)} of the extra kernel time only filled idle time"
    elif k in ("kernels", "swap") and comp < 0 and idle > 0:
        tail = f"; the GPU now idles {fmt_ns(min(idle, -comp), signed=False)} more instead (host-bound)"
    if k == "swap":
        old, newf = c.info["old"], c.info["new"]
        cat = _cat(newf[0])
        words = _CAT_WORDS.get(cat, f"{cat} kernels")
        stage_w = _STAGE_WORDS.get(c.stage)
        what = f"{stage_w} {words}" if stage_w and c.stage not in ("attention",) else words
        bt = sum(base.family_time.get(f, 0.0) for f in old)
        nt = sum(new.family_time.get(f, 0.0) for f in newf)
        # time of the new family against the old one, in the groups of this cause
        b_busy, n_busy = c.base["busy_ns"], c.new["busy_ns"]
        ratio = (n_busy / b_busy) if b_busy else ((nt / bt) if bt else None)
        dts = {_dtype(f) for f in newf} - {None}
        odts = {_dtype(f) for f in old} - {None}
        names_new = ", ".join(newf)
        names_old = ", ".join(old)
        rtxt = f", {ratio:.1f}x the time of the {names_old} family before" if ratio else ""
        if dts and dts != odts:
            types_now = "/".join(sorted(str(t) for t in dts))
            head = f"{what} in {cont(loc)} now run as {types_now} kernels ({names_new}{rtxt})"
        else:
            head = (f"{what} in {cont(loc)} now run as {names_new} instead of {names_old}"
                    + (f" ({rtxt[2:]})" if rtxt else ""))
        return f"{amount}: {head}{tail}"
    if k == "kernels":
        fam = c.info["family"]
        b, n = c.base["busy_ns"], c.new["busy_ns"]
        bc, nc = c.base["count"], c.new["count"]
        if bc == 0 and nc > 0:
            verb = "appeared (new kernels)"
        elif nc == 0 and bc > 0:
            verb = "vanished"
        else:
            verb = "take longer" if c.parts["compute_ns"] > 0 else "take less time"
        cnt = f", {bc:.0f} → {nc:.0f} per step" if abs(nc - bc) >= 0.5 else ""
        return f"{amount}: {fam} kernels in {cont(loc)} {verb} (kernel time {ms(b)} → {ms(n)}{cnt}){tail}"
    if k == "comm":
        kind = c.info["ckind"].replace("_", "-")
        eb, en = c.base["exposed_comm_ns"], c.new["exposed_comm_ns"]
        ob, on = c.base["overlapped_comm_ns"], c.new["overlapped_comm_ns"]
        if c.parts["exposed_comm_ns"] > 0 and ob - on > 0.5 * (en - eb):
            what = _partner(base, c) or "compute"
            verb = f"no longer overlaps {what}" if on < 0.1 * max(ob, 1) else f"overlaps {what} less"
        elif c.parts["exposed_comm_ns"] < 0 and on - ob > 0.5 * (eb - en):
            verb = f"now overlaps {_partner(new, c) or 'compute'}"
        else:
            verb = "takes longer" if c.parts["exposed_comm_ns"] > 0 else "takes less time"
        stage = c.stage
        label = f"{stage} {kind}" if stage in ("dispatch", "combine") else kind
        loc2 = where(c.layers, c.phases, None)
        note = stall_note(c, base, new, ("exposed_a2a", "exposed_comm", "peer_wait", "imbalance"))
        return (f"{amount}: {label} in {cont(loc2)} {verb} (exposed {ms(eb)} → {ms(en)}, "
                f"overlapped {ms(ob)} → {ms(on)}){note}")
    if k == "memory":
        return (f"{amount}: exposed {c.info['family']} in {loc} "
                f"({ms(c.base['exposed_memory_ns'])} → {ms(c.new['exposed_memory_ns'])})")
    if k == "host_sync":
        g = [(key, v) for key, v in new.syncs.items() if key.stage == c.stage] if c.info.get("sign", 1) > 0 else \
            [(key, v) for key, v in base.syncs.items() if key.stage == c.stage]
        ops = sorted({o for _, v in g for o in v.get("ops", ())})
        optxt = f" under {', '.join(ops[:3])}" if ops else ""
        note = stall_note(c, base, new, ("host_sync", "launch_bound", "idle"))
        if c.info.get("sign", 1) > 0:
            return (f"{amount}: new host sync in {loc} (the host waits for the GPU{optxt}; "
                    f"the GPU idles until the host launches again){note}")
        return f"{amount}: host sync removed from {loc}{optxt}{note}"
    if k == "straggler":
        r = c.rank
        growth = (strag or {}).get("comm_growth_ns") or {}
        per = ", ".join(f"{fmt_ns(v)} on rank {rk}" for rk, v in sorted(growth.items())[:8])
        what = "wait it causes per step" if (strag or {}).get("wait") else "comm time per step"
        sign = "is late to" if c.contribution >= 0 else "is no longer late to"
        note = stall_note(c, base, new, ("peer_wait", "imbalance"), stage=False)
        return (f"{amount}: rank {r} {sign} the collectives (straggler): the other ranks wait for it "
                f"(peer wait; {what}: {per}){note}" if per else
                f"{amount}: rank {r} {sign} the collectives (straggler; peer wait){note}")
    if k == "idle":
        note = stall_note(c, base, new, ("host_sync", "launch_bound", "idle"))
        label = "" if note else " (the GPU waits for the host: host- or launch-bound)"
        verb = "grew" if c.contribution > 0 else "shrank"
        return f"{amount}: GPU idle {verb} in {loc}{label}{note}"
    return f"{amount}: {k} {c.key}"


def _partner(side, c) -> str | None:
    """The compute stage that ran beside this cause's collectives the most (on `side`)."""
    tot: dict = {}
    for (layer, phase, stage), d in side.overlaps.items():
        if stage != c.stage or (c.layers and layer not in c.layers) or (c.phases and phase not in c.phases):
            continue
        for st, ns in d.items():
            tot[st] = tot.get(st, 0.0) + ns
    if not tot:
        return None
    st = max(tot, key=lambda s: tot[s])
    words = {"shared_expert": "the shared expert", "experts": "the routed experts", "attention": "attention",
             "router": "the router"}
    return words.get(st, f"the {st} compute")


def stall_note(c, base, new, causes: tuple, stage: bool = True) -> str:
    """'; critical path: new host_sync stall 0 → 35.0 us' for the stalls of this
    cause's stage and layers that are new or grew (shrank or are gone, for an improvement)."""
    if base.stalls is None and new.stalls is None:
        return ""
    b, n = base.stalls or {}, new.stalls or {}
    tot: dict = {}
    for key in set(b) | set(n):
        cause, layer, phase, st = key
        if cause not in causes:
            continue
        if stage and (st != c.stage or (c.layers and layer not in c.layers)):
            continue
        x = tot.setdefault(cause, [0.0, 0.0])
        x[0] += b.get(key, 0.0)
        x[1] += n.get(key, 0.0)
    want = ("new", "grown") if c.contribution >= 0 else ("gone", "shrunk")
    bits = []
    for cause, (bv, nv) in sorted(tot.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0])):
        status = stall_status(bv, nv)
        if status in want and abs(nv - bv) >= 0.05 * abs(c.contribution or 1):
            bits.append(f"{status} {cause} stall {fmt_ns(bv, signed=False)} → {fmt_ns(nv, signed=False)}")
    return f"; critical path: {', '.join(bits[:3])}" if bits else ""

