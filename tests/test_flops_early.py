"""The FLOPs steps built early on a thread (traceview/flops/early.py): the same document as when the
analysis session builds them itself, the tables taken as built (the session never builds them), an
error of the early build raised where the FLOPs section would meet it, and no thread where it does
not pay (one core given, a mapped job); on a large trace after the layers, on a small one from the
start of assemble on a session shared with the analysis session's database."""
import pytest
from helpers import ROOT, TRACES, SpySession

from traceview.document.assemble import assemble
from traceview.engine import steps
from traceview.engine.pipeline import plan
from traceview.flops import early
from traceview.load import load
from traceview.reports import json_report

FIXTURE = ROOT / "fixtures" / "h200_moe_overlap.json.gz"
NSYS = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
EARLY = {"flops_shaped_ops", "flops_shapes", "flops_ops", "flops_kernels", "flops_kernel_info",
         "flops_op_kernels", "flops_embedding_tokens"}


def _doc(profile, step_threads, min_rows):
    s = SpySession(profile, step_threads, min_rows)
    return json_report.render_bytes(assemble(profile, session=s)), s


def test_the_early_steps_read_only_the_profile_and_take_no_parameters():
    # built on the thread with no parameters: a step needing one (or a step table) would fail there
    names = {s.name for s in plan((early.SHAPED,) + early.TARGETS + (early.TOKENS,))}
    assert names == EARLY
    for name in names:
        step = steps.lookup(name)
        assert step.params == () and step.scope == "rank", name


def test_same_document_with_the_flops_steps_built_early():
    profile = load([str(FIXTURE)])
    assert profile.cpu_ranges.num_rows > 1000
    off, s_off = _doc(profile, 1, 10 ** 9)          # one core given: no thread
    on, s_on = _doc(profile, 2, 1000)               # a threshold the fixture reaches: after the layers
    small, s_small = _doc(profile, 2, 10 ** 9)      # no table reaches it: from the start, a shared session
    assert s_off.adopted == [] and EARLY <= set(s_off.made)
    assert set(s_on.adopted) == EARLY and not EARLY & set(s_on.made)   # taken, never built here
    assert set(s_small.adopted) == EARLY and not EARLY & set(s_small.made)
    assert on == off and small == off
    assert b'"trace_flops_per_step":null' not in on.replace(b" ", b"")   # the FLOPs came from the trace


def test_no_shapes_only_the_count_is_taken():
    if not NSYS.exists():
        pytest.skip("the shared corpus is not beside the checkout")
    profile = load([str(NSYS)])
    off, _ = _doc(profile, 1, 10 ** 9)
    on, s_on = _doc(profile, 2, 1)
    small, s_small = _doc(profile, 2, 10 ** 9)
    assert s_on.adopted == s_small.adopted == ["flops_shaped_ops"]   # no op records its shapes: nothing more
    assert on == off == small


def test_no_thread_where_it_does_not_pay():
    profile = load([str(FIXTURE)])
    assert early.start(SpySession(profile, 1, 0), tokens=True) is None          # one core given
    assert early.start(SpySession(profile, 2, 10 ** 9), tokens=True) is None    # a small trace
    got = early.start(SpySession(profile, 2, 0), tokens=False)
    assert got is not None and "flops_embedding_tokens" not in got.later.result()
    # from the start of assemble, on a shared session: only where no table is large, on two cores
    assert early.start_small(SpySession(profile, 1, 10 ** 9), tokens=True) is None
    assert early.start_small(SpySession(profile, 2, 0), tokens=True) is None
    threshold = max(t.num_rows for t in (profile.gpu_activities, profile.cpu_ranges, profile.launches))
    assert early.start_small(SpySession(profile, 2, threshold), tokens=True) is None    # one table reaches it
    got = early.start_small(SpySession(profile, 2, threshold + 1), tokens=True)
    assert got is not None and set(got.later.result()) == EARLY

    class Remote:   # a mapped job: its workers build the per-rank steps
        pass
    profile.remote = Remote()
    try:
        assert early.start(SpySession(profile, 2, 0), tokens=True) is None
        assert early.start_small(SpySession(profile, 2, 10 ** 9), tokens=True) is None
    finally:
        profile.remote = None


def test_an_error_of_the_early_build_is_raised_by_the_analysis(monkeypatch):
    profile = load([str(FIXTURE)])

    def fail(*a):
        raise RuntimeError("early build failed")
    monkeypatch.setattr(early, "_build", fail)
    for min_rows in (0, 10 ** 9):      # after the layers; from the start, on a shared session
        with pytest.raises(RuntimeError, match="early build failed"):
            assemble(profile, session=SpySession(profile, 2, min_rows))
