"""The cause grouping on hand-made sides (no traces): exact sums for any units, time that only
moved between categories, host-sync and kernel-swap classification, verdicts and noise."""
import random

import pytest

from traceview.diff.decompose import EXTRA, PARTS, Side, Unit, Where
from traceview.diff.document import DiffOptions, diff_sides
from traceview.diff.explain import explain


def side(units: dict, syncs: dict | None = None, label="s", steps=None) -> Side:
    """units: {(layer, phase, stage, region, family, class): {part: ns}} of the one median sample."""
    full = {Unit(*k): {p: float(v.get(p, 0)) for p in PARTS + EXTRA} for k, v in units.items()}
    for k, v in full.items():
        v["count"] = float(units[tuple(k)].get("count", 1))
        v["busy_ns"] = float(units[tuple(k)].get("busy_ns", v["compute_ns"]))
    T = sum(sum(u[p] for p in PARTS) for u in full.values())
    steps = steps or [T]
    parts = {p: int(round(sum(u[p] for u in full.values()))) for p in PARTS + ("overlapped_comm_ns",)}
    doc = {"summary": {"step_time_ns": T, "steps": len(steps), "ranks": 1, "rank": 0, "step": 1, **parts},
           "per_rank": [], "comm": [],
           "steps": [{"rank": 0, "step": i + 1, "step_time_ns": t} for i, t in enumerate(steps)],
           "inputs": [], "world_size": 1, "flops": {}}
    samples = [(0, i + 1, int(t)) for i, t in enumerate(steps)]
    from traceview.diff.decompose import median_set, spread
    fam_time = {}
    for k, v in full.items():
        fam_time[k[4]] = fam_time.get(k[4], 0.0) + v["busy_ns"]
    return Side(label=label, paths=[label], doc=doc, step_time_ns=T, samples=samples,
                median_set=median_set(doc["summary"]), units=full,
                syncs={Where(*k): v for k, v in (syncs or {}).items()}, family_time=fam_time,
                family_count={k[4]: v["count"] for k, v in full.items()}, noise=spread(samples))


G = (0, "forward", "experts", "layer")


def test_compute_that_only_fills_idle_is_moved_not_a_regression():
    base = side({G + ("gemm:nvjet bf16", "compute"): {"compute_ns": 100_000, "idle_ns": 60_000}})
    new = side({G + ("gemm:nvjet bf16", "compute"): {"compute_ns": 150_000, "idle_ns": 10_000}})
    doc = diff_sides(base, new, DiffOptions())
    assert doc["delta"]["step_time_ns"] == 0 and doc["verdict"] == "noise"
    (item,) = doc["explanation"]
    assert item["moved"] is True and item["contribution_ns"] == 0
    assert item["parts_ns"] == {"compute_ns": 50_000, "exposed_comm_ns": 0, "exposed_memory_ns": 0, "idle_ns": -50_000}
    assert "50.0 us of the extra kernel time only filled idle time" in item["text"]


def test_host_sync_groups_idle_of_the_stage():
    g3 = G[:3]
    base = side({G + ("gemm:nvjet bf16", "compute"): {"compute_ns": 100_000}})
    new = side({G + ("gemm:nvjet bf16", "compute"): {"compute_ns": 100_000, "idle_ns": 40_000},
                G + ("memcpy:DtoH", "memory"): {"exposed_memory_ns": 2_000},
                (0, "forward", "combine", "layer", "comm:all_to_all", "comm"): {"idle_ns": 5_000}},
               syncs={g3: {"n": 1.0, "dur_ns": 30_000, "ops": {"aten::item"}}})
    items, _ = explain(base, new, threshold=1_000)
    assert items[0]["kind"] == "host_sync"
    # its own stage's idle and copy, plus the idle after it elsewhere (the GPU drained): all of it
    assert items[0]["contribution_ns"] == 47_000 == new.step_time_ns - base.step_time_ns
    assert "aten::item" in items[0]["text"] and len(items) == 1


def test_swap_pairs_vanished_and_appeared_families_of_a_category():
    base = side({G + ("gemm:nvjet bf16", "compute"): {"compute_ns": 10_000, "count": 3},
                 G + ("elementwise bf16", "compute"): {"compute_ns": 5_000}})
    new = side({G + ("gemm:sgemm fp32", "compute"): {"compute_ns": 34_000, "count": 3},
                G + ("elementwise bf16", "compute"): {"compute_ns": 5_000}})
    items, _ = explain(base, new, threshold=100)
    assert items[0]["kind"] == "swap" and items[0]["contribution_ns"] == 24_000
    assert "now run as fp32 kernels (gemm:sgemm fp32, 3.4x the time of the gemm:nvjet bf16 family before)" \
        in items[0]["text"]


@pytest.mark.parametrize("seed", range(25))
def test_items_sum_exactly_for_any_units(seed):
    rng = random.Random(seed)
    stages = ["attention", "router", "dispatch", "experts", "combine", "shared_expert"]
    fams = [("gemm:nvjet bf16", "compute"), ("gemm:sgemm fp32", "compute"), ("elementwise", "compute"),
            ("comm:all_to_all", "comm"), ("memcpy:DtoH", "memory")]

    def units():
        out = {}
        for _ in range(rng.randint(1, 40)):
            key = (rng.randint(0, 3), rng.choice(["forward", "backward"]), rng.choice(stages), "layer") \
                + rng.choice(fams)
            out[key] = {p: rng.randint(0, 200_000) for p in PARTS}
            out[key]["overlapped_comm_ns"] = rng.randint(0, 50_000)
            out[key]["count"] = rng.randint(0, 4)
        return out
    syncs = {(rng.randint(0, 3), "forward", "experts"): {"n": 1.0, "dur_ns": 1, "ops": set()}} if seed % 2 else {}
    base, new = side(units()), side(units(), syncs=syncs)
    doc = diff_sides(base, new, DiffOptions(top=rng.randint(1, 8)))
    change = doc["delta"]["step_time_ns"]
    assert change == round(new.step_time_ns - base.step_time_ns)
    assert sum(it["contribution_ns"] for it in doc["explanation"]) == change
    assert [it["rank"] for it in doc["explanation"]] == list(range(1, len(doc["explanation"]) + 1))
    listed = [it for it in doc["explanation"] if it["kind"] != "remainder"]
    assert [abs(it["contribution_ns"]) for it in listed if not it["moved"]] == sorted(
        (abs(it["contribution_ns"]) for it in listed if not it["moved"]), reverse=True)


def test_noise_threshold_uses_the_step_spread():
    u = {G + ("gemm:nvjet bf16", "compute"): {"compute_ns": 1_000_000}}
    v = {G + ("gemm:nvjet bf16", "compute"): {"compute_ns": 1_030_000}}
    # +3 % with steps spread over 5 % in the new run: noise; with tight steps: a regression
    noisy = diff_sides(side(u, steps=[1_000_000] * 3), side(v, steps=[1_000_000, 1_030_000, 1_050_000]), DiffOptions())
    tight = diff_sides(side(u, steps=[1_000_000] * 3), side(v, steps=[1_030_000] * 3), DiffOptions())
    assert noisy["noise"]["new_spread_ns"] == 50_000 and noisy["verdict"] == "noise"
    assert tight["verdict"] == "regression" and tight["noise"]["threshold_ns"] == 5_000   # the 0.5 % floor


def test_a_slower_kernel_swap_never_shows_a_minus_sign():
    """Host got faster and the experts went fp32: the swap's own idle shrank more (500 us) than its
    kernels grew (300 us). It filled 300 us of idle (net 0); the other 200 us of shrunk idle is the
    host-side gain, its own item, so the list still sums to the change (-200 us)."""
    base = side({G + ("gemm:nvjet bf16", "compute"): {"compute_ns": 100_000, "idle_ns": 500_000}})
    new = side({G + ("gemm:sgemm fp32", "compute"): {"compute_ns": 400_000, "idle_ns": 0}})
    doc = diff_sides(base, new, DiffOptions())
    swap = [it for it in doc["explanation"] if it["kind"] == "swap"][0]
    assert swap["contribution_ns"] == 0 and swap["parts_ns"]["compute_ns"] == 300_000
    assert swap["parts_ns"]["idle_ns"] == -300_000 and not swap["text"].startswith("-")
    idle = [it for it in doc["explanation"] if it["kind"] == "idle"][0]
    assert idle["contribution_ns"] == -200_000
    assert sum(it["contribution_ns"] for it in doc["explanation"]) == doc["delta"]["step_time_ns"] == -200_000
    # and the GPU work grew by 300 us behind it: a latent regression led by the swap
    assert doc["delta"]["gpu_work"]["delta_ns"] == 300_000 and doc["delta"]["gpu_work"]["latent"] is True
    assert doc["latent"][0]["kind"] == "swap" and doc["latent"][0]["cost_ns"] == 300_000
