"""The host-bound H200 recordings (shared/traces/kineto/h200_moe_hostbound: no profiler schedule,
so steps are the script's `step_N` ranges; the GPU idles most of each step). Checked against the
independent second computation of the breakdown, and the idle time against the critical path."""
import independent
import pytest
from helpers import TRACES

from traceview.analysis.pipeline import AnalyzeOptions, run_analyze

HOSTBOUND = TRACES / "kineto" / "h200_moe_hostbound"
pytestmark = pytest.mark.skipif(not HOSTBOUND.exists(), reason="trace corpus not present")


@pytest.fixture(scope="module", params=["overlap", "blocking"])
def both(request):
    path = HOSTBOUND / f"{request.param}.json.gz"
    return request.param, run_analyze([str(path)], AnalyzeOptions()), independent.breakdown(path, step_prefix="step_")


def test_breakdown_matches_independent_computation(both):
    _, doc, ref = both
    independent.assert_steps_match(doc, ref, [2, 3, 4])   # after the script's 2 warm-up steps


def test_host_bound_idle_is_on_the_critical_path_with_causes(both):
    mode, doc, ref = both
    for cp in doc["critical_path"]:
        r = ref[cp["step"]]
        assert r["idle_ns"] > 0.5 * r["step_time_ns"]          # host-bound: the GPU idles most of the step
        # all of it is on the path, split into host causes, and launch-bound dominates
        assert cp["idle_assigned_ns"] == cp["host_sync_ns"] + cp["launch_bound_ns"] + cp["idle_ns"]
        assert abs(cp["idle_assigned_ns"] - r["idle_ns"]) <= 0.001 * r["step_time_ns"]
        assert cp["launch_bound_ns"] > cp["host_sync_ns"] + cp["idle_ns"]
        # with the host this late, the dispatch never overlaps the shared expert, even in overlap mode
        assert r["overlapped_comm_ns"] == 0
