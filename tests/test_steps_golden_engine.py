"""Golden tests of the steps the engine move created or rewrote: small input rows written here, the
step, the expected rows worked out by hand in the comments (tests/steps_golden.py runs one step;
`given` tables stand in for the steps it requires)."""
import pyarrow as pa
from helpers import make_profile
from steps_golden import run_step

import traceview.analysis.breakdown  # noqa: F401  (declares the Python step `windows`)
import traceview.analysis.capture  # noqa: F401  (declares the Python step `rank_first_event`)
import traceview.analysis.layers  # noqa: F401  (declares the Python step `layer_blocks`)


def _t(rows, **types):
    """An Arrow table from rows, with the types of columns that may be all null."""
    names = list(rows[0]) if rows else list(types)
    schema = pa.schema([(n, types.get(n) or pa.array([r[n] for r in rows]).type) for n in names])
    return pa.Table.from_pylist(rows, schema=schema)


def _classed(cls: list[dict]):
    """Rows of classed activities (with their kind and name) as a step reads them: a profile whose
    GPU activities carry the kinds and names, and activity_class's rows without them."""
    from helpers import make_profile
    prof = make_profile(gpu=[{k: c[k] for k in ("id", "rank", "device", "stream", "start_ns", "end_ns", "kind", "name")}
                             for c in cls], ranks=tuple(sorted({c["rank"] for c in cls})))
    return prof, _t([{k: v for k, v in c.items() if k not in ("kind", "name")} for c in cls], coll_range=pa.string())


def _proj(rows, *cols):
    return [tuple(r[c] for c in cols) for r in rows]


# ---------------------------------------------------------------- step windows

STEP_RX = [r"^ProfilerStep#(\d+)$", r"^step[_ #]?(\d+)$", r"^iteration[_ #]?(\d+)$"]


def test_step_source_counts_ranks_whose_matching_ranges_launch_gpu_work():
    cpu = [dict(id=1, rank=0, tid=1, start_ns=0, end_ns=100, name="ProfilerStep#1"),
           dict(id=2, rank=0, tid=1, start_ns=200, end_ns=300, name="step_2"),        # nothing launched in it
           dict(id=3, rank=1, tid=1, start_ns=0, end_ns=100, name="ProfilerStep#1"),
           dict(id=4, rank=1, tid=1, start_ns=0, end_ns=100, name="iteration 1", kind="python")]  # not a step kind
    origin = [dict(id=10, rank=0, tid=1, origin_start_ns=50, origin_end_ns=55, op_id=None, launch_name="k"),
              dict(id=11, rank=1, tid=1, origin_start_ns=150, origin_end_ns=155, op_id=None, launch_name="k"),
              dict(id=12, rank=1, tid=1, origin_start_ns=100, origin_end_ns=101, op_id=None, launch_name="k")]
    got = run_step("step_source", make_profile(cpu=cpu, ranks=(0, 1)),
                   given={"activity_origin": _t(origin, op_id=pa.int64())},
                   params={"step_regexes": STEP_RX}, order_by="regex_index")
    # ProfilerStep: rank 0 launched at 50 in [0,100); rank 1's launches at 150 and 100 are outside
    # [0,100) (end exclusive): 1 rank. step_2 has no launch; `iteration 1` is a python range: 0, 0.
    assert _proj(got, "regex_index", "step_regex", "ranks") == [(1, STEP_RX[0], 1), (2, STEP_RX[1], 0),
                                                                 (3, STEP_RX[2], 0)]
    assert run_step("step_source", make_profile(cpu=cpu), params={"step_regexes": []}) == []


def test_step_source_rank_names_the_ranks_each_regex_finds_steps_with_gpu_work_on():
    """The per-rank part step_source counts (a mapped job's workers find it while placing): one row
    per (regex, rank) however many of the rank's ranges match and launched work."""
    cpu = [dict(id=1, rank=0, tid=1, start_ns=0, end_ns=100, name="ProfilerStep#1"),
           dict(id=2, rank=0, tid=1, start_ns=100, end_ns=200, name="ProfilerStep#2"),
           dict(id=3, rank=0, tid=1, start_ns=300, end_ns=400, name="step_3"),
           dict(id=4, rank=1, tid=1, start_ns=0, end_ns=100, name="ProfilerStep#1"),
           dict(id=5, rank=1, tid=1, start_ns=500, end_ns=600, name="step_5"),
           dict(id=6, rank=1, tid=1, start_ns=0, end_ns=900, name="iteration 1", kind="python")]
    origin = [dict(id=10 + i, rank=r, tid=1, origin_start_ns=t, origin_end_ns=t + 1, op_id=None, launch_name="k")
              for i, (r, t) in enumerate([(0, 50), (0, 150), (0, 399), (1, 100), (1, 550)])]
    given = {"activity_origin": _t(origin, op_id=pa.int64())}
    params = {"step_regexes": STEP_RX}
    got = run_step("step_source_rank", make_profile(cpu=cpu, ranks=(0, 1)), given=given, params=params,
                   order_by="regex_index, rank")
    # rank 0: ProfilerStep#1 and #2 both launched (50, 150): regex 1 once; step_3 launched at 399: regex 2.
    # rank 1: ProfilerStep#1 [0,100) has no launch (100 is its end); step_5 launched at 550: regex 2;
    # `iteration 1` is a python range, not a step kind
    assert _proj(got, "regex_index", "rank") == [(1, 0), (2, 0), (2, 1)]
    total = run_step("step_source", make_profile(cpu=cpu, ranks=(0, 1)), given=given, params=params,
                     order_by="regex_index")
    assert _proj(total, "regex_index", "ranks") == [(1, 1), (2, 2), (3, 0)]


def test_windows_are_the_step_windows_or_the_whole_trace():
    step = [dict(rank=0, step=3, name="ProfilerStep#3", start_ns=10, end_ns=90, activities=2)]
    whole = [dict(rank=0, step=0, name="whole trace", start_ns=5, end_ns=120, activities=4)]
    given = {"step_windows": step, "whole_windows": whole}
    assert run_step("windows", given=given, params={"whole_trace": False}) == step
    assert run_step("windows", given=given, params={"whole_trace": True}) == whole


def test_step_ranges_matched_counts_nested_and_duplicate_matches():
    cpu = [dict(id=1, start_ns=0, end_ns=100, name="ProfilerStep#1", tid=1),
           dict(id=2, start_ns=10, end_ns=90, name="ProfilerStep#1", tid=1, depth=1),    # nested duplicate
           dict(id=3, start_ns=200, end_ns=300, name="ProfilerStep#2", tid=1, kind="op"),
           dict(id=4, start_ns=300, end_ns=400, name="ProfilerStep#3", tid=1, kind="python"),  # not a step kind
           dict(id=5, start_ns=300, end_ns=400, name="ProfilerStep#x", tid=1)]             # no match
    got = run_step("step_ranges_matched", make_profile(cpu=cpu), params={"step_regex": STEP_RX[0]})
    assert got == [dict(rank=0, n=3)]


def test_top_kernels_total_time_inside_the_windows_over_ranks():
    cls = [dict(id=i, rank=r, device=0, stream=7, start_ns=s, end_ns=e, kind="kernel", name=n, cls="compute",
                coll_range=None)
           for i, r, s, e, n in [(1, 0, 0, 10, "A"), (2, 1, 20, 40, "A"), (3, 0, 40, 90, "B"),
                                 (4, 0, 95, 130, "C"),      # ends after rank 0's window [0,100): left out
                                 (5, 1, 0, 5, "C")]]        # before rank 1's window [10,100)
    cls = [{**c, "class": c.pop("cls")} for c in cls]
    win = [dict(rank=0, step=1, name="s", start_ns=0, end_ns=100, activities=3),
           dict(rank=1, step=1, name="s", start_ns=10, end_ns=100, activities=1)]
    prof, classed = _classed(cls)
    got = run_step("top_kernels", prof, given={"activity_class": classed, "windows": win},
                   order_by="total_ns DESC, name")
    # B: 50 ns once; A: 10 + 20 = 30 ns twice (on two ranks)
    assert _proj(got, "name", "class", "count", "total_ns") == [("B", "compute", 1, 50), ("A", "compute", 2, 30)]


def test_top_kernels_rank_counts_each_ranks_activities_inside_its_windows():
    """The per-rank part top_kernels sums (a mapped job's workers build it): the same rows as above,
    kept apart by rank; an activity inside two windows of its rank counts twice, as in top_kernels."""
    cls = [dict(id=i, rank=r, device=0, stream=7, start_ns=s, end_ns=e, kind="kernel", name=n, cls="compute",
                coll_range=None)
           for i, r, s, e, n in [(1, 0, 0, 10, "A"), (2, 1, 20, 40, "A"), (3, 0, 40, 90, "B"),
                                 (4, 0, 95, 130, "C"),      # ends after rank 0's windows: left out
                                 (5, 1, 0, 5, "C"),         # before rank 1's window [10,100)
                                 (6, 0, 42, 44, "B")]]      # inside both of rank 0's windows
    cls = [{**c, "class": c.pop("cls")} for c in cls]
    win = [dict(rank=0, step=1, name="s", start_ns=0, end_ns=100, activities=4),
           dict(rank=0, step=2, name="s", start_ns=41, end_ns=50, activities=1),
           dict(rank=1, step=1, name="s", start_ns=10, end_ns=100, activities=1)]
    prof, classed = _classed(cls)
    given = {"activity_class": classed, "windows": win}
    got = run_step("top_kernels_rank", prof, given=given, order_by="rank, name")
    # rank 0: A 10 ns once; B 50 + 2 in step 1 and 2 again in step 2: 3 times, 54 ns. rank 1: A 20 ns once
    assert _proj(got, "rank", "name", "count", "total_ns") == [(0, "A", 1, 10), (0, "B", 3, 54), (1, "A", 1, 20)]
    total = run_step("top_kernels", prof, given=given, order_by="total_ns DESC, name")
    assert _proj(total, "name", "count", "total_ns") == [("B", 3, 54), ("A", 2, 30)]


# ---------------------------------------------------------------- range context, layers

RULES = {"layer_regexes": [r"^layer_(\d+)/", r"^blk(\w+)$"],
         "stage_regexes": ["dispatch", "moe", "(?i)attn"], "stage_names": ["dispatch", "experts", "attention"],
         "phase_regexes": [r"\(F\)$", r"^backward$"], "phase_names": ["forward", "backward"]}


def _ctx_profile():
    r = lambda i, name, s, e, parent=None, kind="annotation", **kw: dict(  # noqa: E731
        id=i, tid=1, name=name, start_ns=s, end_ns=e, parent_id=parent, kind=kind, **kw)
    return make_profile(cpu=[
        r(1, "layer_2/moe", 0, 100),
        r(2, "dispatch", 10, 50, 1),
        r(3, "aten::mm", 20, 30, 2, "op"),
        r(5, "dispatch(F)", 200, 300),
        r(6, "autograd::engine::evaluate_function: MmBackward0", 210, 220, 5, "op", seq=7),
        r(7, "model.py(12): dispatch", 400, 410, kind="python"),
        r(8, "moe/token_dispatcher.py(40): dispatch", 500, 510, kind="python"),
        r(9, "layer_3/dispatch/moe", 600, 700),
        r(10, "blkX", 800, 900),
        r(11, "backward", 900, 1000),
        r(12, "attn", 910, 920, 11),
        r(13, "aten::topk", 1000, 1010, kind="op"),
    ])


def test_range_context_raw_tags_from_the_first_matching_rule():
    got = {r["id"]: r for r in run_step("range_context_raw", _ctx_profile(), params=RULES)}
    cols = ("layer", "stage", "phase", "anchor", "names_stage", "head")
    want = {
        1: (2, "experts", None, None, True, None),        # layer rule 1 -> 2; `moe` -> experts
        2: (2, "dispatch", None, None, True, None),       # own stage, layer 2 from its parent: no head
        3: (2, "dispatch", None, None, False, None),      # an op names nothing; inherits
        5: (None, "dispatch", "forward", None, True, 5),  # a stage without a layer: its own head
        6: (None, "dispatch", "forward", 6, False, 5),    # backward node (seq + evaluate_function): anchor
        8: (None, "dispatch", None, None, True, 8),       # a with_stack frame (7) names no stage,
        9: (3, "dispatch", None, None, True, None),       # except Megatron's token dispatcher; the first
        11: (None, None, "backward", None, False, None),  # stage rule wins over `moe`; phase rules read
        12: (None, "attention", "backward", None, True, 12),   # the name
    }
    # 7 (a with_stack frame), 10 (blkX: the group is no number, rule 2 matched) and 13 (an op at the
    # root) inherit nothing: no row (a reader's join by id reads them as without context)
    assert {i: tuple(got[i][c] for c in cols) for i in got} == want
    assert {r["rank"] for r in got.values()} == {0} and {r["tid"] for r in got.values()} == {1}


def test_name_tags_tag_each_distinct_name_once():
    got = {r["name"]: r for r in run_step("name_tags", _ctx_profile(), params=RULES)}
    cols = ("frame_only", "layer", "stage", "phase", "bwd_name")
    want = {
        "layer_2/moe": (False, 2, "experts", None, False),        # layer rule 1 -> 2; `moe` -> experts
        "dispatch": (False, None, "dispatch", None, False),
        "aten::mm": (False, None, None, None, False),              # no rule matches
        "dispatch(F)": (False, None, "dispatch", "forward", False),
        "autograd::engine::evaluate_function: MmBackward0": (False, None, None, None, True),
        "model.py(12): dispatch": (True, None, "dispatch", None, False),   # a frame: its function's stage,
        "moe/token_dispatcher.py(40): dispatch": (False, None, "dispatch", None, False),  # kept only here
        "layer_3/dispatch/moe": (False, 3, "dispatch", None, False),       # the first stage rule wins
        "blkX": (False, None, None, None, False),                  # layer rule 2 matched: no number
        "backward": (False, None, None, "backward", False),        # phase rules read the name
        "attn": (False, None, "attention", None, False),
        "aten::topk": (False, None, None, None, False),
    }
    assert {n: tuple(got[n][c] for c in cols) for n in got} == want


def test_name_tags_with_no_rules_or_more_rules_than_one_regex_holds():
    # each family's rules are first joined into one regex that lets through the names some rule
    # matches (name_tags.sql); with no rule nothing is tagged, and past 64 rules every name is let
    # through: the first matching rule still decides, however many there are
    none = {"layer_regexes": [], "stage_regexes": [], "stage_names": [], "phase_regexes": [], "phase_names": []}
    got = run_step("name_tags", _ctx_profile(), params=none)
    assert len(got) == 12 and all(r["layer"] is None and r["stage"] is None and r["phase"] is None for r in got)
    many = dict(RULES)
    filler = [f"^never{i}$" for i in range(70)]
    many["stage_regexes"] = filler + ["dispatch", "moe"]
    many["stage_names"] = [f"n{i}" for i in range(70)] + ["dispatch", "experts"]
    many["phase_regexes"] = [r"F\)$|^backward$", r"^backward$"]   # an alternation at a rule's top level
    many["phase_names"] = ["odd", "backward"]
    got = {r["name"]: (r["layer"], r["stage"], r["phase"]) for r in run_step("name_tags", _ctx_profile(), params=many)}
    assert got["layer_2/moe"] == (2, "experts", None)
    assert got["layer_3/dispatch/moe"] == (3, "dispatch", None)      # rule 71 comes before rule 72
    assert got["attn"] == (None, None, None) and got["aten::mm"] == (None, None, None)
    # the odd phase rule, matched alone (RE2 as DuckDB runs it): `dispatch(F)` and `backward` are its
    assert got["dispatch(F)"][2] == "odd" and got["backward"][2] == "odd"
    # two layer rules naming the same group, joined into one regex: each still matched alone
    named = dict(RULES, layer_regexes=[r"^layer_(?P<n>\d+)/moe$", r"^layer_(?P<n>\d+)/"])
    got = {r["name"]: r["layer"] for r in run_step("name_tags", _ctx_profile(), params=named)}
    assert got["layer_2/moe"] == 2 and got["layer_3/dispatch/moe"] == 3 and got["blkX"] is None


# what each range of _ctx_profile names by itself: (parent_id, layer, stage, phase, bwd_node)
_OWN_TAGS = {
    1: (None, 2, "experts", None, False),
    2: (1, None, "dispatch", None, False),       # nothing inherited here: range_context_raw does that
    3: (2, None, None, None, False),             # an op names nothing
    5: (None, None, "dispatch", "forward", False),
    6: (5, None, None, None, True),              # seq + evaluate_function: a backward node (an op: no stage)
    7: (None, None, None, None, False),          # a with_stack frame names no stage
    8: (None, None, "dispatch", None, False),    # ... except Megatron's token dispatcher
    9: (None, 3, "dispatch", None, False),
    10: (None, None, None, None, False),
    11: (None, None, None, "backward", False),
    12: (11, None, "attention", None, False),    # the phase is its parent's (inherited later)
    13: (None, None, None, None, False),         # an op without seq is no backward node
}


def _own_tags(session) -> tuple[dict, list]:
    from traceview.analysis import range_tree
    from traceview.engine.pipeline import build
    build(session, ["name_tags"], RULES)
    got = range_tree.tags(range_tree._ranges(session), session.sql("SELECT * FROM name_tags")).to_pylist()
    cols = ("parent_id", "layer", "stage", "phase", "bwd_node")
    return {r["id"]: tuple(r[c] for c in cols) for r in got}, [r["id"] for r in got]


def test_ranges_take_their_names_tags_in_id_order():
    """The profile's own table, read in place (its name and kind dictionary-coded)."""
    from steps_golden import session_for
    profile = _ctx_profile()
    assert pa.types.is_dictionary(profile.cpu_ranges.schema.field("name").type)
    got, order = _own_tags(session_for(profile))
    assert got == _OWN_TAGS and order == sorted(order)


def test_ranges_out_of_id_order_and_plain_strings_take_the_same_tags():
    """cpu_ranges given as a plain table (strings, not dictionaries) with its rows reversed: read
    through a query in id order."""
    from steps_golden import session_for
    rows = _ctx_profile().cpu_ranges.to_pylist()[::-1]
    fields = [f.with_type(pa.string()) if pa.types.is_dictionary(f.type) else f
              for f in _ctx_profile().cpu_ranges.schema]
    got, order = _own_tags(session_for(make_profile(), {"cpu_ranges": pa.Table.from_pylist(rows, pa.schema(fields))}))
    assert got == _OWN_TAGS and order == sorted(order)


def test_range_context_raw_without_rules_tags_nothing():
    empty = {k: [] for k in RULES}
    got = run_step("range_context_raw", _ctx_profile(), params=empty)
    assert {(r["layer"], r["stage"], r["phase"]) for r in got} == {(None, None, None)}
    assert [r["anchor"] for r in got if r["anchor"] is not None] == [6]


def test_layer_heads_in_block_order_with_phase_and_pass():
    cpu = [dict(id=i, tid=t, start_ns=s, end_ns=s + 5, name=n) for i, t, s, n in
           [(1, 1, 30, "attn(F)"), (2, 1, 10, "mlp(F)"), (3, 2, 20, "mlp(B)"), (4, 2, 40, "mlp(W)"),
            (5, 1, 500, "attn(F)"), (6, 1, 50, "inner")]]
    raw = [dict(id=i, rank=0, tid=t, layer=None, stage="x", phase=p, anchor=a, names_stage=True, head=h)
           for i, t, p, a, h in [(1, 1, "forward", None, 1), (2, 1, None, None, 2), (3, 2, "backward", None, 3),
                                 (4, 2, None, 99, 4), (5, 1, "forward", None, 5), (6, 1, "forward", None, 1)]]
    steps = [dict(rank=0, step=4, range_id=100, tid=1, cpu_start_ns=0, cpu_end_ns=100, name="ProfilerStep#4")]
    got = run_step("layer_heads", make_profile(cpu=cpu),
                   given={"range_context_raw": _t(raw, layer=pa.int32(), anchor=pa.int64()), "step_ranges": steps})
    # 6 is no head (head 1); 5 starts outside every step: step 0; 4 has an anchor: backward, `(W)`: pass W;
    # 2 has no phase: forward. Ordered by rank, step, tid, phase, pass, start
    assert _proj(got, "id", "step", "tid", "phase", "pass") == [
        (5, 0, 1, "forward", ""), (2, 4, 1, "forward", ""), (1, 4, 1, "forward", ""),
        (3, 4, 2, "backward", ""), (4, 4, 2, "backward", "W")]


def test_layer_blocks_number_repeating_blocks():
    def h(i, name, phase="forward", tid=1, pass_="", start=None):
        return dict(id=i, rank=0, step=1, tid=tid, phase=phase, **{"pass": pass_}, name=name,
                    start_ns=start if start is not None else i * 10)
    heads = [h(1, "attn"), h(2, "mlp"), h(3, "attn"), h(4, "mlp"),                   # 2 blocks: 0 0 1 1
             h(11, "attn", "backward"), h(12, "mlp", "backward"), h(13, "attn", "backward"),
             h(14, "mlp", "backward"),                                              # backward counts down
             h(15, "w", "backward", pass_="W"), h(16, "w", "backward", pass_="W"),  # as many blocks: numbered
             h(21, "attn", tid=2), h(22, "mlp", tid=2),                              # one block: not numbered
             h(31, "moe", tid=3), h(32, "moe", tid=3)]                               # one-annotation blocks: not
    got = {r["id"]: r["layer"] for r in run_step("layer_blocks", given={"layer_heads": heads})}
    assert got == {1: 0, 2: 0, 3: 1, 4: 1, 11: 1, 12: 1, 13: 0, 14: 0, 15: 1, 16: 0}


def test_range_context_fills_inferred_layers_from_the_head():
    raw = [dict(id=i, rank=0, tid=1, layer=lay, stage=s, phase=None, anchor=None, names_stage=True, head=hd)
           for i, lay, s, hd in [(1, None, "attn", 1), (2, None, "attn", 1), (3, 5, "mlp", None), (4, None, "x", 9)]]
    blocks = [dict(id=1, rank=0, layer=3)]
    got = {r["id"]: (r["layer"], r["layer_inferred"]) for r in run_step(
        "range_context", given={"range_context_raw": _t(raw, layer=pa.int32(), phase=pa.string(),
                                                        anchor=pa.int64(), head=pa.int64()),
                                "layer_blocks": _t(blocks, layer=pa.int32(), rank=pa.int32())})}
    assert got == {1: (3, True), 2: (3, True), 3: (5, False), 4: (None, False)}


# ---------------------------------------------------------------- shares of the window's time
# One window [0,100) on rank 0: compute K1 [0,60), comm C1 [40,80), nothing [80,90), compute K2 [90,100).
# Boundaries 0 40 60 80 90 100 -> segments 0..5 with (c, m, x): (1,0,0) (1,1,0) (0,1,0) (0,0,0) (1,0,0), end.

SEGS = [dict(rank=0, step=1, t=t, seg=i, t_end=te, c=c, m=m, x=0) for i, (t, te, c, m) in
        enumerate([(0, 40, 1, 0), (40, 60, 1, 1), (60, 80, 0, 1), (80, 90, 0, 0), (90, 100, 1, 0), (100, None, 0, 0)])]
SPANS = [dict(rank=0, step=1, id=i, **{"class": c}, s=s, e=e, i0=i0, i1=i1) for i, c, s, e, i0, i1 in
         [(1, "compute", 0, 60, 0, 2), (2, "comm", 40, 80, 1, 3), (3, "compute", 90, 100, 4, 5)]]
GIVEN_SEGS = {"segments": _t(SEGS, t_end=pa.int64()), "activity_spans": SPANS}


def test_activity_shares_split_each_segment_among_the_activities_deciding_it():
    got = run_step("activity_shares", given=GIVEN_SEGS, order_by="id, idle_ns")
    cols = ("id", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns", "idle_ns")
    # K1: 40 + 20 compute; C1: 20 overlapped (beside K1), 20 exposed; K2: 10 compute, and the idle gap
    # [80,90) is charged to K2 (it starts where the gap ends) as a row of its own
    assert _proj(got, *cols) == [(1, 60, 0, 0, 0, 0), (2, 0, 20, 20, 0, 0), (3, 10, 0, 0, 0, 0), (3, 0, 0, 0, 0, 10)]


def test_activity_shares_equal_split_of_shared_segments():
    # two compute kernels over [0,10): 5 each; one comm over [0,10) beside them: overlapped 10
    segs = [dict(rank=0, step=1, t=0, seg=0, t_end=10, c=2, m=1, x=0), dict(rank=0, step=1, t=10, seg=1, t_end=None,
                                                                             c=0, m=0, x=0)]
    spans = [dict(rank=0, step=1, id=i, **{"class": c}, s=0, e=10, i0=0, i1=1)
             for i, c in [(1, "compute"), (2, "compute"), (3, "comm")]]
    got = run_step("activity_shares", given={"segments": _t(segs, t_end=pa.int64()), "activity_spans": spans},
                   order_by="id")
    assert _proj(got, "id", "compute_ns", "overlapped_comm_ns") == [(1, 5, 0), (2, 5, 0), (3, 0, 10)]


def _attr(rows):
    return _t([dict(id=i, rank=0, step=1, layer=lay, phase=p, stage=s, region=rg, is_backward=False, linked=True,
                    layer_inferred=inf, cross_thread=False, cross_ambiguous=False)
               for i, lay, p, s, rg, inf in rows], layer=pa.int32())


def test_layer_times_sum_and_round_per_group():
    shares = [dict(id=i, rank=0, step=1, compute_ns=c, exposed_comm_ns=e, overlapped_comm_ns=o,
                   exposed_memory_ns=0.0, idle_ns=d)
              for i, c, e, o, d in [(1, 10.4, 0.0, 0.0, 0.0), (2, 10.3, 0.0, 2.5, 0.0), (3, 0.0, 4.0, 0.0, 0.0),
                                    (3, 0.0, 0.0, 0.0, 6.0)]]
    attr = _attr([(1, 0, "forward", "attention", "layer", False), (2, 0, "forward", "attention", "layer", True),
                  (3, None, "other", "other", "outside", False)])
    got = run_step("layer_times", given={"activity_shares": shares, "activity_attribution": attr},
                   order_by="layer NULLS LAST")
    cols = ("layer", "stage", "layer_inferred", "compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "idle_ns",
            "comm_ns", "step_time_ns", "activities")
    # layer 0: compute 10.4 + 10.3 = 20.7 -> 21; overlapped 2.5 -> 3 (DuckDB rounds half away from zero); step time
    # = compute + exposed comm + memory + idle = 20.7 -> 21; one inferred member: inferred.
    # outside: exposed comm 4, idle 6 (the same activity twice: one activity), step time 10
    assert _proj(got, *cols) == [(0, "attention", True, 21, 3, 0, 0, 3, 21, 2),
                                 (None, "other", False, 0, 0, 4, 6, 4, 10, 1)]


def test_comm_exposure_is_the_comm_only_share():
    got = run_step("comm_exposure", given=GIVEN_SEGS)
    assert got == [dict(id=2, rank=0, exposed=20.0)]          # [60,80): only C1 runs


def test_comm_summary_by_kind_over_the_steps():
    ops = [dict(id=i, rank=r, start_ns=0, end_ns=d, name="nccl", comm_kind=k, bytes=b, op_key=key)
           for i, r, d, k, b, key in [(1, 0, 30, "all_to_all", 100, "c1"), (2, 0, 20, "all_to_all", 50, "c1"),
                                      (3, 1, 40, "all_to_all", 100, "c2"), (4, 0, 10, "all_reduce", None, "k4"),
                                      (5, 0, 99, "all_reduce", 8, "k5")]]
    exposure = [dict(id=1, rank=0, exposed=10.25), dict(id=3, rank=1, exposed=5.5), dict(id=4, rank=0, exposed=2.0)]
    attr = _attr([(i, None, "other", "other", "outside", False) for i in (1, 2, 3, 4, 5)])
    attr = attr.set_column(2, "step", pa.array([1, 1, 1, 1, None], pa.int64()))   # activity 5 is in no step
    got = run_step("comm_summary", given={"comm_ops": _t(ops, bytes=pa.int64()), "comm_exposure": exposure,
                                          "activity_attribution": attr}, order_by="total_ns DESC")
    # all_to_all: ops c1, c2; 3 activities; bytes 250; 30+20+40 = 90 ns; exposed 10.25 + 5.5 -> 16
    # all_reduce: activity 5 is outside the steps; bytes null -> sum null; exposed 2
    assert _proj(got, "kind", "ops", "count", "bytes", "total_ns", "exposed_ns") == [
        ("all_to_all", 2, 3, 250, 90, 16), ("all_reduce", 1, 1, None, 10, 2)]


def test_comm_summary_rank_keeps_each_ranks_parts_and_their_sums_are_comm_summary():
    """The per-rank parts comm_summary sums (a mapped job's workers build them): a kind's exposure
    counts on a rank where none of its activities is inside a step when another rank has one
    inside; a kind inside no step anywhere is left out of the sum."""
    ops = [dict(id=i, rank=r, start_ns=0, end_ns=d, name="nccl", comm_kind=k, bytes=b, op_key=key)
           for i, r, d, k, b, key in [(1, 0, 30, "all_to_all", 100, "c1"), (2, 0, 20, "all_to_all", 50, "c1"),
                                      (3, 1, 40, "all_to_all", 100, "c2"), (4, 0, 10, "all_reduce", None, "k4"),
                                      (5, 0, 99, "all_reduce", 8, "k5"), (6, 0, 7, "broadcast", 4, "k6"),
                                      (7, 1, 5, "all_reduce", 16, "k7")]]
    exposure = [dict(id=1, rank=0, exposed=10.25), dict(id=3, rank=1, exposed=5.5), dict(id=4, rank=0, exposed=2.0),
                dict(id=6, rank=0, exposed=1.5), dict(id=7, rank=1, exposed=3.25)]
    attr = _attr([(i, None, "other", "other", "outside", False) for i in range(1, 8)])
    attr = attr.set_column(2, "step", pa.array([1, 1, 1, 1, None, None, None], pa.int64()))   # 5, 6, 7: no step
    given = {"comm_ops": _t(ops, bytes=pa.int64()), "comm_exposure": exposure, "activity_attribution": attr}
    got = run_step("comm_summary_rank", given=given, order_by="rank, kind")
    # rank 0: all_reduce: only activity 4 is inside a step (10 ns, bytes null), exposed 2.0;
    #         all_to_all: c1 twice (one op), 150 B, 50 ns, exposed 10.25 (activity 2 has none);
    #         broadcast: nothing inside a step, exposed 1.5
    # rank 1: all_reduce: nothing inside a step, exposed 3.25; all_to_all: c2, 100 B, 40 ns, exposed 5.5
    assert _proj(got, "rank", "kind", "ops", "count", "bytes", "total_ns", "exposed_ns") == [
        (0, "all_reduce", 1, 1, None, 10, 2.0), (0, "all_to_all", 1, 2, 150, 50, 10.25),
        (0, "broadcast", 0, 0, None, 0, 1.5), (1, "all_reduce", 0, 0, None, 0, 3.25),
        (1, "all_to_all", 1, 1, 100, 40, 5.5)]
    total = run_step("comm_summary", given=given, order_by="total_ns DESC")
    # all_to_all: 2 ops, 3 activities, 250 B, 90 ns, exposed 10.25 + 5.5 = 15.75 -> 16;
    # all_reduce: exposed 2.0 + 3.25 = 5.25 -> 5 (rank 1's activity 7 is outside the steps, its
    # exposure is the kind's); broadcast: inside no step, left out
    assert _proj(total, "kind", "ops", "count", "bytes", "total_ns", "exposed_ns") == [
        ("all_to_all", 2, 3, 250, 90, 16), ("all_reduce", 1, 1, None, 10, 5)]


def _layer_rows(rows):
    return _t([dict(rank=r, step=st, layer=lay, phase=ph, stage=sg, region=rg, layer_inferred=False,
                    compute_ns=t - 1, exposed_comm_ns=1, overlapped_comm_ns=0, exposed_memory_ns=0, idle_ns=0,
                    comm_ns=1, step_time_ns=t, activities=1)
               for r, st, lay, ph, sg, rg, t in rows], layer=pa.int32())


def test_stage_totals_rank_sums_each_ranks_stages_and_finds_their_first_rows():
    lt = _layer_rows([(0, 1, None, "forward", "moe", "layer_unknown", 5),
                      (0, 1, 0, "forward", "attention", "layer", 7),
                      (0, 1, 0, "forward", "moe", "layer", 3),
                      (0, 2, 0, "backward", "attention", "layer", 4),
                      (1, 1, 1, "forward", "moe", "layer", 10),
                      (1, 1, 1, "forward", "dispatch", "layer", 11)])
    got = run_step("stage_totals_rank", given={"layer_times": lt}, order_by="rank, first_pos")
    # rank 0 in the report's order (step, layer with none last, phase, stage, region):
    #   1: (1, 0, forward, attention)  2: (1, 0, forward, moe)  3: (1, none, forward, moe)
    #   4: (2, 0, backward, attention)
    #   attention: first 1, 7 + 4 = 11; moe: first 2, 3 + 5 = 8
    # rank 1: 1: (1, 1, forward, dispatch)  2: (1, 1, forward, moe): dispatch first 1, 11; moe first 2, 10
    assert _proj(got, "rank", "stage", "first_pos", "step_time_ns", "compute_ns", "comm_ns") == [
        (0, "attention", 1, 11, 9, 2), (0, "moe", 2, 8, 6, 2), (1, "dispatch", 1, 11, 10, 1), (1, "moe", 2, 10, 9, 1)]


def test_stage_totals_order_ties_by_where_the_stage_first_comes_in_the_layer_rows():
    """layers.stage_totals over stage_totals_rank: the sums over the ranks, the largest step time
    first; equal step times in the order of each stage's first layer row (rank, then its order)."""
    from steps_golden import session_for

    from traceview.analysis.layers import stage_totals
    lt = _layer_rows([(1, 1, 0, "forward", "gate", "layer", 6),       # gate: 6 + 5 = 11, first on rank 0
                      (0, 1, 0, "forward", "moe", "layer", 9),        # moe: 9 + 11 = 20
                      (0, 1, 0, "forward", "zeta", "layer", 11),      # zeta: 11, first on rank 0 at 3
                      (0, 1, 0, "forward", "gate", "layer", 5),       # rank 0: gate 1, moe 2, zeta 3
                      (1, 1, 0, "forward", "moe", "layer", 11),
                      (1, 1, 0, "forward", "alpha", "layer", 11)])    # alpha: 11, first on rank 1
    got = stage_totals(session_for(given={"layer_times": lt}))
    assert [(s["stage"], s["step_time_ns"], s["compute_ns"]) for s in got] == [
        ("moe", 20, 18), ("gate", 11, 9), ("zeta", 11, 10), ("alpha", 11, 10)]


def test_attribution_groups_count_and_busy_time_per_kind_of_attribution():
    gpu = [dict(id=i, start_ns=0, end_ns=d, name="k", stream=1) for i, d in [(1, 10), (2, 20), (3, 5), (4, 7)]]
    attr = _attr([(1, 0, "forward", "attention", "layer", False), (2, 0, "forward", "attention", "layer", False),
                  (3, None, "other", "other", "unattributed", False), (4, None, "other", "other", "outside", False)])
    attr = attr.set_column(2, "step", pa.array([1, 1, 1, None], pa.int64()))
    got = run_step("attribution_groups", make_profile(gpu=gpu), given={"activity_attribution": attr},
                   order_by="region")
    assert _proj(got, "rank", "region", "n", "busy_ns") == [(0, "layer", 2, 30), (0, "unattributed", 1, 5)]


# ---------------------------------------------------------------- the diff's steps

def test_diff_units_group_shares_by_name_class_and_collective_kind():
    shares = [dict(id=i, rank=0, step=1, compute_ns=c, exposed_comm_ns=e, overlapped_comm_ns=0.0,
                   exposed_memory_ns=0.0, idle_ns=d)
              for i, c, e, d in [(1, 6.0, 0.0, 0.0), (2, 4.0, 0.0, 0.0), (2, 0.0, 0.0, 3.0), (3, 0.0, 5.0, 0.0)]]
    spans = [dict(rank=0, step=1, id=i, **{"class": c}, s=s, e=e, i0=0, i1=1)
             for i, c, s, e in [(1, "compute", 0, 6), (2, "compute", 10, 14), (3, "comm", 20, 30)]]
    gpu = [dict(id=i, start_ns=0, end_ns=1, name=n, stream=1) for i, n in [(1, "gemm"), (2, "gemm"), (3, "nccl")]]
    cls = [dict(id=i, rank=0, device=0, stream=1, start_ns=0, end_ns=1, kind="kernel", name=n, **{"class": c},
                coll_range=None) for i, n, c in [(1, "gemm", "compute"), (2, "gemm", "compute"), (3, "nccl", "comm")]]
    ops = [dict(id=3, rank=0, start_ns=20, end_ns=30, name="nccl", comm_kind="all_reduce", bytes=8, op_key="k3")]
    attr = _attr([(i, 0, "forward", "experts", "layer", False) for i in (1, 2, 3)])
    got = run_step("diff_units", make_profile(gpu=gpu),
                   given={"activity_shares": shares, "activity_spans": spans,
                          "activity_class": _t(cls, coll_range=pa.string()),
                          "comm_ops": ops, "activity_attribution": attr}, order_by="name")
    # gemm: compute 6 + 4, idle 3 (activity 2's idle row); busy: 6 + 4 (the idle row adds no busy
    # time), count 2; nccl: exposed 5, busy 10, kind all_reduce
    assert _proj(got, "name", "class", "comm_kind", "compute_ns", "exposed_comm_ns", "idle_ns", "busy_ns", "count") == [
        ("gemm", "compute", None, 10.0, 0.0, 3.0, 10.0, 2), ("nccl", "comm", "all_reduce", 0.0, 5.0, 0.0, 10.0, 1)]


def test_diff_syncs_per_step_and_issuing_op():
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=1000, name="ProfilerStep#1"),
           dict(id=2, tid=1, start_ns=10, end_ns=20, name="aten::item", kind="op", parent_id=1)]
    launches = [dict(id=5, tid=1, start_ns=12, end_ns=18, name="cudaStreamSynchronize", correlation=77, op_id=2),
                dict(id=6, tid=1, start_ns=30, end_ns=31, name="cudaStreamSynchronize", correlation=78, op_id=None)]
    syncs = [dict(id=50, kind="stream_sync", start_ns=12, end_ns=18, correlation=77, stream=7),
             dict(id=51, kind="stream_sync", start_ns=30, end_ns=34, correlation=78, stream=7),
             dict(id=52, kind="stream_wait_event", start_ns=40, end_ns=41, correlation=79, stream=7),   # not a sync
             dict(id=53, kind="stream_sync", start_ns=2000, end_ns=2004, correlation=78, stream=7)]  # no step
    ctx = [dict(id=2, rank=0, tid=1, layer=4, stage="router", phase=None, anchor=None, names_stage=False, head=None,
                layer_inferred=False)]
    steps = [dict(rank=0, step=1, range_id=1, tid=1, cpu_start_ns=0, cpu_end_ns=1000, name="ProfilerStep#1")]
    got = run_step("diff_syncs", make_profile(cpu=cpu, launches=launches, syncs=syncs),
                   given={"range_context": _t(ctx, phase=pa.string(), anchor=pa.int64(), head=pa.int64(),
                                              layer=pa.int32()), "step_ranges": steps},
                   order_by="layer NULLS LAST")
    # sync 50: issued by aten::item in layer 4 (router; no phase, a layer: forward); 51: no op
    assert _proj(got, "step", "kind", "n", "dur_ns", "layer", "phase", "stage", "op") == [
        (1, "stream_sync", 1, 6, 4, "forward", "router", "aten::item"),
        (1, "stream_sync", 1, 4, None, "other", "other", None)]


def test_diff_overlaps_compute_beside_each_collective():
    cls = [dict(id=i, rank=0, device=0, stream=st, start_ns=s, end_ns=e, kind="kernel", name="k", **{"class": c},
                coll_range=None)
           for i, st, s, e, c in [(1, 1, 0, 50, "comm"), (2, 2, 10, 20, "compute"), (3, 2, 40, 70, "compute"),
                                  (4, 2, 80, 90, "compute")]]
    win = [dict(rank=0, step=1, name="s", start_ns=0, end_ns=45, activities=3)]
    attr = _attr([(1, 2, "forward", "dispatch", "layer", False), (2, 2, "forward", "shared_expert", "layer", False),
                  (3, 2, "forward", "experts", "layer", False), (4, 2, "forward", "experts", "layer", False)])
    got = run_step("diff_overlaps", given={"activity_class": _t(cls, coll_range=pa.string()), "windows": win,
                                           "activity_attribution": attr}, order_by="with_stage")
    # comm [0,50) clipped to the window: [0,45); beside it [10,20) -> 10 and [40,70) -> [40,45) = 5; [80,90) none
    assert _proj(got, "stage", "with_stage", "overlap_ns") == [("dispatch", "experts", 5.0),
                                                               ("dispatch", "shared_expert", 10.0)]


# ---------------------------------------------------------------- the Perfetto export's steps

def test_activity_timeline_lists_every_activity_with_its_attribution():
    gpu = [dict(id=1, start_ns=0, end_ns=5, name="a", stream=2), dict(id=2, start_ns=3, end_ns=9, name="b", stream=1)]
    cls = [dict(id=1, rank=0, device=0, stream=2, start_ns=0, end_ns=5, kind="kernel", name="a", **{"class": "compute"},
                coll_range=None)]
    attr = _attr([(2, 1, "backward", "experts", "layer", False)])
    got = run_step("activity_timeline", make_profile(gpu=gpu),
                   given={"activity_class": _t(cls, coll_range=pa.string()), "activity_attribution": attr},
                   order_by="id")
    # activity 1 has a class but no attribution, 2 the other way round (left joins keep both)
    assert _proj(got, "id", "stream", "class", "step", "layer", "stage") == [(1, 2, "compute", None, None, None),
                                                                            (2, 1, None, 1, 1, "experts")]


def test_segment_groups_name_who_each_segment_is_charged_to():
    attr = _attr([(1, 0, "forward", "attention", "layer", False), (2, None, "other", "other", "outside", False),
                  (3, 1, "forward", "experts", "layer", True)])
    got = run_step("segment_groups", given={**GIVEN_SEGS, "activity_attribution": attr}, order_by="t")
    # seg 0 [0,40): K1; seg 1 [40,60): K1 (compute decides; C1 is overlapped); seg 2 [60,80): C1;
    # seg 3 [80,90) idle: K2, which ends it; seg 4 [90,100): K2
    assert _proj(got, "seg", "layers", "stages") == [
        (0, ["layer 0"], ["attention"]), (1, ["layer 0"], ["attention"]), (2, ["outside layers"], ["other"]),
        (3, ["layer 1 (inferred)"], ["experts"]), (4, ["layer 1 (inferred)"], ["experts"])]


# ---------------------------------------------------------------- rank_first_event

def test_rank_first_event_is_the_earliest_start_over_the_four_tables():
    cpu = [dict(id=1, rank=0, tid=1, start_ns=500, end_ns=900, name="a"),
           dict(id=2, rank=1, tid=1, start_ns=40, end_ns=60, name="b")]
    launches = [dict(id=3, rank=0, tid=1, start_ns=450, end_ns=460, correlation=1),
                dict(id=4, rank=1, tid=1, start_ns=70, end_ns=80, correlation=2)]
    gpu = [dict(id=5, rank=0, start_ns=300, end_ns=700, name="k", stream=7, correlation=1, launch_id=3),
           dict(id=6, rank=1, start_ns=90, end_ns=95, name="k", stream=7, correlation=2, launch_id=4)]
    syncs = [dict(id=7, rank=0, tid=1, start_ns=1000, end_ns=1100)]
    got = run_step("rank_first_event", make_profile(cpu=cpu, launches=launches, gpu=gpu, syncs=syncs, ranks=(0, 1, 2)),
                   order_by="rank")
    # rank 0: cpu 500, launch 450, gpu 300, sync 1000 -> 300 (a GPU activity before any CPU range);
    # rank 1: cpu 40 -> 40; rank 2 has no events: no row
    assert _proj(got, "rank", "first_ns") == [(0, 300), (1, 40)]
    assert run_step("rank_first_event", make_profile()) == []


NO_RULES = {"layer_regexes": [], "stage_regexes": [], "stage_names": [], "phase_regexes": [], "phase_names": []}


def _context_table(profile, params):
    from steps_golden import session_for

    from traceview.engine.pipeline import build
    s = session_for(profile)
    build(s, ["range_context_raw"], params)
    return s.arrow("range_context_raw")


def test_range_context_raw_reads_no_range_where_no_name_tags_anything(monkeypatch):
    """Where no name tags a layer, stage, phase or backward node (range_tree.names_nothing), no range
    inherits anything: the step reads no range and gives what the whole computation gives, no row,
    with the same columns and types."""
    from traceview.analysis import range_tree
    prof = make_profile(cpu=[dict(id=1, tid=1, name="nccl:all_reduce", start_ns=0, end_ns=10),
                             dict(id=2, tid=1, name="aten::mm", start_ns=2, end_ns=5, parent_id=1, kind="op", seq=3)])
    monkeypatch.setattr(range_tree, "names_nothing", lambda *a: False)   # the whole computation
    whole = _context_table(prof, RULES)
    monkeypatch.undo()

    def unread(session):
        raise AssertionError("the ranges were read")
    monkeypatch.setattr(range_tree, "_ranges", unread)
    short = _context_table(prof, RULES)
    assert whole.num_rows == 0 and short.num_rows == 0
    assert short.schema == whole.schema and short.column_names == list(range_tree.PRODUCES)


def test_range_context_raw_backward_nodes_alone_are_read():
    # no rule at all, but a backward node (an evaluate_function range with a sequence number) is
    # named by the step itself: the ranges are read and range 6 is its own anchor (by hand)
    from traceview.analysis import range_tree
    got = {r["id"]: r for r in run_step("range_context_raw", _ctx_profile(), params=NO_RULES)}
    assert {i: (r["layer"], r["stage"], r["phase"], r["anchor"], r["head"]) for i, r in got.items()} == \
        {6: (None, None, None, 6, None)}
    names = run_step("name_tags", _ctx_profile(), params=NO_RULES)
    assert not range_tree.names_nothing(pa.Table.from_pylist(names))


def test_range_context_raw_skips_the_rounds_where_only_ops_are_named(monkeypatch):
    # a name that tags a stage (`attn`) names only ops here, which drop it (range_tree.tags): no range
    # names anything by itself, so none inherits anything and the rounds are not run
    from traceview.analysis import range_tree
    prof = make_profile(cpu=[dict(id=1, tid=1, name="step", start_ns=0, end_ns=100),
                             dict(id=2, tid=1, name="flash_attn_fwd", start_ns=10, end_ns=20, parent_id=1, kind="op"),
                             dict(id=3, tid=1, name="aten::mm", start_ns=30, end_ns=40, parent_id=2, kind="op")])
    rounds: list = []
    inherit = range_tree.inherit

    def spied(parent, *a):
        rounds.append(len(parent))
        return inherit(parent, *a)
    monkeypatch.setattr(range_tree, "inherit", spied)
    short = _context_table(prof, RULES)
    assert rounds == [0, 0]         # over no range (the two calls of context_batches)
    monkeypatch.setattr(range_tree, "names_nothing", lambda *a: False)   # the whole computation
    whole = _context_table(prof, RULES)
    assert rounds[2:] == [3, 3]
    assert whole.num_rows == 0 and short.num_rows == 0 and short.schema == whole.schema
    names = run_step("name_tags", prof, params=RULES)
    assert {r["name"]: r["stage"] for r in names}["flash_attn_fwd"] == "attention"
