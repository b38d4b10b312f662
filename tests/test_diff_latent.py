"""A latent regression: a host-bound run whose routed-expert GEMMs got slower (fp32) but only filled
idle time. The step time does not move; the GPU work does, and diff must say so.

The pair is built from the fixture simulator: the base is `moe_step` with host-side work before
every expert GEMM (the GPU idles meanwhile); the new run is the same trace with every forward
expert GEMM renamed to the fp32 kernel and stretched into the idle gap after it (never reaching
the next activity), so by construction the step windows are unchanged and the GPU work of each
step grows by exactly the sum of the stretches in it."""
import json
import re
import subprocess
import sys

import pytest

from fixtures.moe_sim import moe_step
from fixtures.scenario_base import GEMM_BF16, GEMM_FP32

FACTOR = 4.0          # the expert GEMMs would take 4x as long, as far as the idle gap allows
SCN = dict(layers=2, steps=3, experts=32, host_sync=True)


def _union(iv):
    tot, cur = 0, None
    for s, e in sorted(iv):
        if cur is None or s > cur[1]:
            if cur:
                tot += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return tot + (cur[1] - cur[0] if cur else 0)


def latent_pair():
    base, new = moe_step(**SCN), moe_step(**SCN)
    grown = {}    # step -> ns of GPU work added in it
    (rt,) = new.ranks
    experts = [r for r in rt.ranges if re.fullmatch(r"layer_\d\d/moe/experts", r.name)]
    steps = [r for r in rt.ranges if r.name.startswith("ProfilerStep#")]
    gpus = rt.gpu()
    for a in rt.apis:
        g = a.gpu
        if g is None or g.name != GEMM_BF16 or not any(r.start <= a.start < r.end for r in experts):
            continue
        assert not any(x is not g and x.start < g.end < x.end for x in gpus)   # idle right after it
        nxt = min(x.start for x in gpus if x is not g and x.start >= g.end)
        ext = min(int((FACTOR - 1) * (g.end - g.start)), nxt - g.end - 1_000)
        assert ext > 0
        g.end += ext
        g.name = GEMM_FP32
        (st,) = [int(r.name.split("#")[1]) for r in steps if r.start <= a.start < r.end]
        grown[st] = grown.get(st, 0) + ext
    rt.validate()
    return base, new, grown


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base, new, grown = latent_pair()
    root = tmp_path_factory.mktemp("latent")
    b, n = base.write(root, "base"), new.write(root, "new")
    return base, new, grown, b["kineto"], n["kineto"]


def _busy(scn, step_no):
    (w,) = [s for s in scn.expected["steps"] if s["step"] == step_no]
    return _union([(g.start, g.end) for g in scn.ranks[0].gpu()
                   if g.start >= w["window_start_ns"] and g.end <= w["window_end_ns"]])


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True)


def test_construction_keeps_the_steps(pair):
    base, new, grown, _, _ = pair
    # the stretched kernels end before the next activity: the step windows cannot move
    new_windows = [(s["window_start_ns"], s["window_end_ns"]) for s in new.expected["steps"]]
    assert new_windows == [(s["window_start_ns"], s["window_end_ns"]) for s in base.expected["steps"]]
    assert len(grown) == 3 and all(v > 0 for v in grown.values())


def test_latent_regression_led_by_the_expert_gemms(pair):
    base, new, grown, b, n = pair
    r = _cli("diff", b, n, "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "noise" and doc["delta"]["step_time_ns"] == 0
    step = doc["new"]["median_set"][0]["step"]
    assert doc["base"]["median_set"] == doc["new"]["median_set"]
    # the GPU work of the compared step, by a union of the fixture's own intervals
    bw, nw = _busy(base, step), _busy(new, step)
    assert nw - bw == grown[step]
    w = doc["delta"]["gpu_work"]
    assert (w["base_ns"], w["new_ns"], w["delta_ns"]) == (bw, nw, grown[step])
    assert w["hidden_ns"] == grown[step] and w["latent"] is True
    assert w["pct"] == pytest.approx(100 * grown[step] / bw)
    assert w["pct"] > 20
    first = doc["latent"][0]
    assert first["kind"] == "swap" and first["cost_ns"] > 0
    assert first["cost_ns"] == pytest.approx(grown[step], abs=2)
    assert first["layers"] == [0, 1] and "fp32" in first["text"] and "routed-expert GEMMs" in first["text"]
    assert first["text"].startswith("+")
    # the explanation item of the same swap: it moved idle into compute, never a minus sign
    swap = [it for it in doc["explanation"] if it["kind"] == "swap"][0]
    assert swap["contribution_ns"] >= 0 and swap["moved"] is True
    assert swap["parts_ns"]["compute_ns"] == pytest.approx(grown[step], abs=2)


def test_every_format_names_it(pair):
    _, _, _, b, n = pair
    txt = _cli("diff", b, n).stdout
    assert txt.startswith("traceview diff: NOISE + LATENT REGRESSION")
    assert "Latent regression: GPU work +" in txt
    md = _cli("diff", b, n, "-f", "markdown").stdout
    assert "noise + latent regression" in md and "> [!WARNING]" in md
    html = _cli("diff", b, n, "-f", "html").stdout
    assert "noise + latent regression" in html and "<h2>Latent regression</h2>" in html


def test_exit_codes(pair):
    _, _, _, b, n = pair
    assert _cli("diff", b, n, "--fail-if-gpu-slower", "20").returncode == 1
    assert _cli("diff", b, n, "--fail-if-slower", "5").returncode == 0
    assert _cli("diff", b, n, "--fail-if-gpu-slower", "90").returncode == 0
    assert _cli("diff", n, b, "--fail-if-gpu-slower", "20").returncode == 0     # the other way: less work
    r = _cli("diff", b, n, "--fail-if-gpu-slower", "-3")
    assert r.returncode == 2 and "--fail-if-gpu-slower" in r.stderr and "Traceback" not in r.stderr


def test_whole_captures_compare_gpu_work(pair):
    """Without step ranges the window is the capture: its length did not change here, the GPU work
    dropped (new -> base), which is what the verdict must follow, with a warning."""
    base, new, grown, b, n = pair
    r = _cli("diff", n, b, "--whole-trace", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["delta"]["step_time_ns"] == 0
    assert doc["noise"]["compared"] == "gpu_work"
    assert doc["verdict"] == "improvement" and doc["latent"] == []
    assert doc["delta"]["gpu_work"]["delta_ns"] == -sum(grown.values())
    assert any("whole capture" in w for w in doc["warnings"])
    txt = _cli("diff", b, n, "--whole-trace").stdout
    assert txt.startswith("traceview diff: REGRESSION") and "warning: no step ranges" in txt
