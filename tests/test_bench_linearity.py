"""bench/bench_speed.py's linearity figures, against numbers worked out by hand."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "bench" / "bench_speed.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_speed_under_test", _PATH)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_exact_line_gives_its_fixed_cost_and_slope(bench):
    # wall = 0.5 s + 20 us x N (cpu = 2 x wall): every step costs 20 us a GPU activity
    pts = {f: (1000 * f, 0.5 + 20e-6 * 1000 * f, 2 * (0.5 + 20e-6 * 1000 * f)) for f in (5, 10, 50)}
    got = bench.linearity(pts)
    assert got["fixed_s"] == pytest.approx(0.5)
    assert got["slope_us"] == pytest.approx(20.0)
    assert [w for w, _ in got["steps"]] == pytest.approx([20.0, 20.0])
    assert [c for _, c in got["steps"]] == pytest.approx([40.0, 40.0])
    assert got["step_ratio_wall"] == pytest.approx(1.0)
    # flat within 1.3 between N = 5,000 and 50,000: F/5000 + s <= 1.3 (F/50000 + s), s = 20e-6
    # F (1/5000 - 1.3/50000) <= 0.3 x 20e-6  ->  F <= 6e-6 / 1.74e-4 = 0.0344827... s
    assert got["fixed_allowed_s"] == pytest.approx(6e-6 / 1.74e-4)


def test_steps_between_consecutive_factors(bench):
    # hand-made walls: x5 1.0 s (N 100), x10 1.5 s (N 200), x25 4.5 s (N 500)
    pts = {5: (100, 1.0, 1.0), 10: (200, 1.5, 2.0), 25: (500, 4.5, 5.0)}
    got = bench.linearity(pts)
    # (1.5 - 1.0) / 100 = 5 ms a GPU activity, (4.5 - 1.5) / 300 = 10 ms
    assert [w for w, _ in got["steps"]] == pytest.approx([5000.0, 10000.0])
    assert [c for _, c in got["steps"]] == pytest.approx([10000.0, 10000.0])
    assert got["step_ratio_wall"] == pytest.approx(2.0)
    assert got["step_ratio_cpu"] == pytest.approx(1.0)
    # least squares by hand: mean N 800/3, mean wall 7/3; Sxy = sum (N - mN)(w - mw) = 2350/3,
    # Sxx = 260000/3 -> slope 47/5200 s a GPU activity, fixed 7/3 - (47/5200)(800/3) = -1/13 s
    assert got["slope_us"] == pytest.approx(47 / 5200 * 1e6)
    assert got["fixed_s"] == pytest.approx(-1 / 13)


def test_factors_below_five_are_left_out(bench):
    pts = {1: (10, 9.0, 9.0), 5: (100, 1.0, 1.0), 10: (200, 2.0, 2.0)}
    got = bench.linearity(pts)
    assert len(got["steps"]) == 1
    assert got["fixed_s"] == pytest.approx(0.0)
    assert bench.linearity({1: (10, 1.0, 1.0), 5: (100, 2.0, 2.0)}) == {}


def test_no_room_means_any_fixed_cost_is_too_much_or_none_is(bench):
    # N_min = 100, N_max = 110: 1/100 - 1.3/110 < 0, any fixed cost keeps the ratio within 1.3
    got = bench.linearity({5: (100, 1.0, 1.0), 10: (110, 1.1, 1.1)})
    assert math.isinf(got["fixed_allowed_s"])


def test_nsys_targets_by_hand(bench):
    """analyze / read-once and peak / export size of each scale, against hand-computed ratios."""
    nsys = {100: ({"traceview": {"wall": 7.2, "cpu": 12.0, "mem": 1006.0}, "read-once": {"wall": 3.6, "mem": 506.0}},
                  230.0),
            1: ({"traceview": {"wall": 0.56, "mem": 190.0}, "read-once": {"error": "exit 1"}}, 2.5)}
    rows = bench.nsys_target_rows(nsys)
    assert [r[0] for r in rows] == ["nsys x1: analyze / read-once (wall)", "nsys x1: analyze memory / export size",
                                    "nsys x100: analyze / read-once (wall)", "nsys x100: analyze memory / export size"]
    assert rows[0][1] is None                                   # (the read-once failed: no ratio)
    assert rows[1][1] == pytest.approx(76.0) and not rows[1][3](rows[1][1])   # 190 / 2.5
    assert rows[2][1] == pytest.approx(2.0) and rows[2][3](rows[2][1])        # 7.2 / 3.6: at the target, met
    assert rows[3][1] == pytest.approx(1006 / 230) and not rows[3][3](rows[3][1])


def test_paired_ratio_is_the_median_of_each_rounds_ratio(bench):
    # three rounds: HTA 3.0, 3.3, 4.0 s beside traceview 1.0, 0.6, 1.0 s -> ratios 3.0, 5.5, 4.0
    hta = {"wall": 3.3, "walls": [3.0, 3.3, 4.0]}
    tv = {"wall": 1.0, "walls": [1.0, 0.6, 1.0]}
    assert bench.paired(hta, tv) == pytest.approx(4.0)
    assert bench._ratio(hta, tv, "wall") == pytest.approx(3.3)     # the ratio of the medians differs
    # a round where one of them failed is left out: ratios 3.0 and 4.0 -> 3.5
    assert bench.paired(hta, {"wall": 1.0, "walls": [1.0, None, 1.0]}) == pytest.approx(3.5)
    assert bench.paired(hta, {"error": "rc 1"}) is None and bench.paired(None, tv) is None


def test_interleaved_keeps_each_rounds_wall_in_order(bench, monkeypatch):
    walls = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    monkeypatch.setattr(bench, "measure", lambda cmd: {"wall": next(walls), "cpu": 0.0, "rss": 0.0, "tree": 0.0,
                                                       "mem": 0.0, "rc": 0, "err": ""})
    got = bench.interleaved({"a": ["a"], "b": ["b"]}, 3)      # rounds: a b, a b, a b
    assert got["a"]["walls"] == [1.0, 3.0, 5.0] and got["b"]["walls"] == [2.0, 4.0, 6.0]
    assert got["a"]["wall"] == 3.0 and bench.paired(got["b"], got["a"]) == pytest.approx(4.0 / 3.0)
