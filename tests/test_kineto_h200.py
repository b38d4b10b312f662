"""Done-when checks of the foundation issue on our own H200 MoE traces (an independent second method)."""
import independent
import pytest
from helpers import TRACES

from traceview.analysis.pipeline import AnalyzeOptions, run_analyze

H200 = TRACES / "kineto" / "h200_moe"


@pytest.fixture(scope="module", params=["overlap", "blocking"])
def both(request):
    path = H200 / f"{request.param}.json.gz"
    return request.param, run_analyze([str(path)], AnalyzeOptions()), independent.breakdown(path)


def test_breakdown_matches_independent_computation(both):
    _, doc, ref = both
    independent.assert_steps_match(doc, ref, [1, 2, 3])


def test_partition_adds_up_exactly(both):
    _, doc, _ = both
    for s in doc["steps"]:
        assert s["compute_ns"] + s["exposed_comm_ns"] + s["exposed_memory_ns"] + s["idle_ns"] == s["step_time_ns"]


def test_overlap_only_in_overlap_mode(both):
    mode, doc, _ = both
    overlapped = [s["overlapped_comm_ns"] for s in doc["steps"]]
    if mode == "overlap":
        assert all(o > 0 for o in overlapped)
    else:
        assert overlapped == [0, 0, 0]
    # the all-to-all copies under c10d::alltoall_base_ are communication in both modes
    assert all(s["comm_ns"] > 1_000_000 for s in doc["steps"])
