"""Cross-thread attribution, inferred layer ordinals and 'layer unknown' on hand-made profiles
(every expected value below is read off the hand-drawn timeline in the comments)."""
from helpers import make_profile

from traceview.analysis import breakdown, layers
from traceview.config import Rules
from traceview.engine.session import Session


def _attr(profile):
    s = Session(profile)
    breakdown.prepare(s, breakdown.Options())
    layers.prepare(s, Rules())
    return s, {r["id"]: r for r in s.rows("SELECT * FROM activity_attribution")}


def _profile():
    # main thread 1 (training thread: holds ProfilerStep#1), no layer numbers anywhere:
    #   [0, 10000) ProfilerStep#1
    #     forward blocks:  attn(F) [100,200) mlp(F) [200,300) | attn(F) [300,400) mlp(F) [400,500)
    #     backward blocks: mlp(B) [1000,1100) attn(B) [1100,1200) | mlp(B) [1200,1300) attn(B) [1300,1400)
    #     mlp(W) [2000,2100) | mlp(W) [2100,2200)           (deferred weight gradients, own pass)
    #     optimizer [3000,3500)
    # thread 2 (autograd engine, no annotations): launches at 1150 (inside the 1st attn(B)),
    #   1250 (inside the 2nd mlp(B)) and 2500 (nothing open on thread 1 but the step)
    # thread 3 (a second training-like thread with its own annotation): none
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=10_000, name="ProfilerStep#1")]
    spans = [("attn(F)", 100), ("mlp(F)", 200), ("attn(F)", 300), ("mlp(F)", 400),
             ("mlp(B)", 1000), ("attn(B)", 1100), ("mlp(B)", 1200), ("attn(B)", 1300),
             ("mlp(W)", 2000), ("mlp(W)", 2100), ("optimizer", 3000)]
    for i, (name, s) in enumerate(spans):
        cpu.append(dict(id=10 + i, tid=1, start_ns=s, end_ns=s + (500 if name == "optimizer" else 100), name=name,
                        depth=1, parent_id=1))
    # one op per forward block on thread 1, launching a kernel
    for i, s in enumerate((110, 210, 310, 410)):
        cpu.append(dict(id=30 + i, tid=1, start_ns=s, end_ns=s + 50, name="aten::mm", kind="op", depth=2,
                        parent_id=10 + i))
    cpu.append(dict(id=40, tid=1, start_ns=2010, end_ns=2050, name="aten::mm", kind="op", depth=2, parent_id=18))
    cpu.append(dict(id=41, tid=1, start_ns=2110, end_ns=2150, name="aten::mm", kind="op", depth=2, parent_id=19))
    # thread 2 ops (no seq, no annotation)
    for i, s in enumerate((1150, 1250, 2500)):
        cpu.append(dict(id=50 + i, tid=2, start_ns=s, end_ns=s + 20, name="aten::mm", kind="op"))
    launch_ops = {61: (1, 115, 30), 62: (1, 215, 31), 63: (1, 315, 32), 64: (1, 415, 33),
                  65: (2, 1152, 50), 66: (2, 1252, 51), 67: (2, 2502, 52), 68: (1, 2015, 40), 69: (1, 2115, 41)}
    launches = [dict(id=i, tid=t, start_ns=s, end_ns=s + 2, correlation=i, op_id=op)
                for i, (t, s, op) in launch_ops.items()]
    gpu = [dict(id=100 + i, stream=7, start_ns=20_000 + 100 * i, end_ns=20_050 + 100 * i, name=f"k{i}",
                correlation=i, launch_id=i) for i in launch_ops]
    return make_profile(cpu, launches, gpu)


def test_forward_blocks_numbered_in_order_backward_counting_down():
    _, got = _attr(_profile())
    want = {161: (0, "forward", "attention"), 162: (0, "forward", "experts"),
            163: (1, "forward", "attention"), 164: (1, "forward", "experts"),
            # W pass: 2 blocks in backward order -> layers 1, 0
            168: (1, "backward", "experts"), 169: (0, "backward", "experts")}
    for i, (layer, phase, stage) in want.items():
        r = got[i]
        assert (r["layer"], r["phase"], r["stage"], r["region"], r["layer_inferred"]) == \
            (layer, phase, stage, "layer", True), i


def test_cross_thread_takes_the_training_thread_annotation_open_at_launch():
    s, got = _attr(_profile())
    # 1150: 1st backward block (layer 1 counting down), attn(B); 1250: 2nd block (layer 0), mlp(B)
    assert (got[165]["layer"], got[165]["phase"], got[165]["stage"], got[165]["cross_thread"]) == \
        (1, "backward", "attention", True)
    assert (got[166]["layer"], got[166]["phase"], got[166]["stage"], got[166]["cross_thread"]) == \
        (0, "backward", "experts", True)
    # 2500: only the step range is open on thread 1 (it names no stage): not attributed across threads
    assert got[167]["cross_thread"] is False and got[167]["layer"] is None and got[167]["stage"] == "other"
    summ = layers.attribution_summary(s)
    assert summ["cross_thread"]["count"] == 2
    assert summ["cross_thread"]["busy_ns"] == 100          # two 50 ns kernels
    assert summ["cross_thread"]["ambiguous_count"] == 0


def test_two_training_threads_with_annotations_open_is_ambiguous():
    p = make_profile(
        cpu=[dict(id=1, tid=1, start_ns=0, end_ns=1000, name="attn(B)"),      # no step ranges: both
             dict(id=2, tid=3, start_ns=0, end_ns=1000, name="mlp(B)"),       # threads are candidates
             dict(id=3, tid=2, start_ns=100, end_ns=200, name="aten::mm", kind="op")],
        launches=[dict(id=9, tid=2, start_ns=110, end_ns=120, correlation=9, op_id=3)],
        gpu=[dict(id=90, stream=7, start_ns=5000, end_ns=5100, name="k", correlation=9, launch_id=9)])
    s, got = _attr(p)
    assert got[90]["cross_thread"] is False and got[90]["cross_ambiguous"] is True
    assert got[90]["stage"] == "other"
    assert layers.attribution_summary(s)["cross_thread"]["ambiguous_count"] == 1


def test_stage_without_layer_is_layer_unknown_not_outside():
    # one block only (no repetition): the stage is known, the layer is not
    p = make_profile(
        cpu=[dict(id=1, tid=1, start_ns=0, end_ns=1000, name="ProfilerStep#1"),
             dict(id=2, tid=1, start_ns=10, end_ns=100, name="attn(F)", depth=1, parent_id=1),
             dict(id=3, tid=1, start_ns=20, end_ns=90, name="aten::mm", kind="op", depth=2, parent_id=2),
             dict(id=4, tid=1, start_ns=200, end_ns=300, name="aten::embedding", kind="op", depth=1, parent_id=1)],
        launches=[dict(id=7, tid=1, start_ns=30, end_ns=35, correlation=7, op_id=3),
                  dict(id=8, tid=1, start_ns=210, end_ns=215, correlation=8, op_id=4)],
        gpu=[dict(id=70, stream=7, start_ns=5000, end_ns=5100, name="k7", correlation=7, launch_id=7),
             dict(id=80, stream=7, start_ns=5200, end_ns=5300, name="k8", correlation=8, launch_id=8)])
    _, got = _attr(p)
    assert (got[70]["region"], got[70]["stage"], got[70]["layer"]) == ("layer_unknown", "attention", None)
    assert (got[80]["region"], got[80]["stage"]) == ("outside", "other")


def test_infer_blocks_splits_where_a_name_repeats():
    def h(i, name, phase="forward", pass_=""):
        return dict(id=i, rank=0, step=1, tid=1, phase=phase, pass_=pass_, name=name) | {"pass": pass_}
    # dense layer (attn, mlp) then two MoE layers (attn, dispatch, mlp, combine)
    seq = [h(1, "attn(F)"), h(2, "mlp(F)"), h(3, "attn(F)"), h(4, "dispatch(F)"), h(5, "mlp(F)"),
           h(6, "combine(F)"), h(7, "attn(F)"), h(8, "dispatch(F)"), h(9, "mlp(F)"), h(10, "combine(F)")]
    assert layers.infer_blocks(seq) == {1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 1, 7: 2, 8: 2, 9: 2, 10: 2}
    # one annotation repeating (iterations or layers: cannot tell) is not numbered
    assert layers.infer_blocks([h(1, "MoE[x]"), h(2, "MoE[x]")]) == {}


def test_thread_with_annotations_elsewhere_still_takes_the_open_one_on_another_thread():
    # no step ranges: threads 1 and 2 both hold stage annotations (both are training threads);
    # thread 2's kernel at 150 is launched while only thread 1 has one open (attn(B) [100, 300))
    p = make_profile(
        cpu=[dict(id=1, tid=1, start_ns=100, end_ns=300, name="attn(B)"),
             dict(id=2, tid=2, start_ns=400, end_ns=500, name="combine(B)"),
             dict(id=3, tid=2, start_ns=140, end_ns=200, name="aten::mm", kind="op")],
        launches=[dict(id=9, tid=2, start_ns=150, end_ns=155, correlation=9, op_id=3)],
        gpu=[dict(id=90, stream=7, start_ns=5000, end_ns=5100, name="k", correlation=9, launch_id=9)])
    _, got = _attr(p)
    assert (got[90]["cross_thread"], got[90]["phase"], got[90]["stage"], got[90]["region"]) == \
        (True, "backward", "attention", "layer_unknown")


def test_communication_operations_group_kernels_of_one_collective_or_dispatch():
    # thread 1, step [0, 10000):
    #   c10d::alltoall_base_ [10, 100) launching two copies (one operation, two activities)
    #   dispatch(F) [200, 300): DeepEP notify_dispatch + dispatch (one dispatch operation)
    #   combine(F) [400, 500): DeepEP cached_notify_combine + combine (one combine)
    #   two NCCL kernels launched outside any collective range, inside `forward` (two operations)
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=10_000, name="ProfilerStep#1"),
           dict(id=2, tid=1, start_ns=5, end_ns=9_000, name="forward", depth=1, parent_id=1),
           dict(id=3, tid=1, start_ns=10, end_ns=100, name="c10d::alltoall_base_", kind="op", depth=2, parent_id=2),
           dict(id=4, tid=1, start_ns=200, end_ns=300, name="dispatch(F)", depth=2, parent_id=2),
           dict(id=5, tid=1, start_ns=400, end_ns=500, name="combine(F)", depth=2, parent_id=2)]
    kernels = [(3, "Memcpy DtoD (Device -> Device)", 20), (3, "Memcpy DtoD (Device -> Device)", 40),
               (4, "void deep_ep::intranode::notify_dispatch<8>(int const*)", 210),
               (4, "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*)", 220),
               (5, "void deep_ep::intranode::cached_notify_combine<8>(void**)", 410),
               (5, "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*)", 420),
               (2, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 600),
               (2, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 700)]
    launches, gpu = [], []
    for i, (op, name, t) in enumerate(kernels):
        launches.append(dict(id=i + 1, tid=1, start_ns=t, end_ns=t + 5, correlation=i + 1, op_id=op))
        gpu.append(dict(id=100 + i, stream=21, start_ns=20_000 + 1000 * i, end_ns=20_500 + 1000 * i, name=name,
                        correlation=i + 1, launch_id=i + 1, kind="memcpy" if name.startswith("Memcpy") else "kernel"))
    from traceview.document.assemble import assemble
    doc = assemble(make_profile(cpu, launches, gpu))
    rows = {r["kind"]: (r["ops"], r["count"]) for r in doc["comm"]}
    assert rows == {"all_to_all": (3, 6), "all_reduce": (2, 2)}
