"""Per-layer, per-phase, per-MoE-stage attribution of GPU time, and communication by collective kind."""
from __future__ import annotations

from ..config import Rules
from ..engine.session import Session, sql_text

LAYER_FIELDS = ("step_time_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns",
                "idle_ns", "comm_ns")


def _tag_sql(rules: Rules) -> tuple[str, dict]:
    """CASE expressions for the range tags; regexes travel as parameters, never as SQL text."""
    params: dict = {}
    layer = []
    for i, rx in enumerate(rules.layer):
        params[f"layer_{i}"] = rx
        layer.append(f"WHEN regexp_matches(tname, $layer_{i}) "
                     f"THEN try_cast(regexp_extract(tname, $layer_{i}, 1) AS INTEGER)")
    stage, phase = [], []
    for i, (rx, name) in enumerate(rules.stage):
        params[f"stage_{i}"], params[f"stage_name_{i}"] = rx, name
        stage.append(f"WHEN regexp_matches(tname, $stage_{i}) THEN $stage_name_{i}")
    for i, (rx, name) in enumerate(rules.phase):
        params[f"phase_{i}"], params[f"phase_name_{i}"] = rx, name
        phase.append(f"WHEN regexp_matches(name, $phase_{i}) THEN $phase_name_{i}")

    def case(parts: list[str], typ: str, annotations_only: bool = False) -> str:
        if not parts:
            return f"CAST(NULL AS {typ})"
        # framework ops (aten::topk, MmBackward0, ...) name no layer or stage: only annotations,
        # NVTX ranges and module (python) ranges do; `with_stack` frames (`file.py(12): fn`) do
        # not either (`_must_dispatch_in_python`, `_prepare_4d_attention_mask` name no stage)
        # (except Megatron's MoE token dispatcher, whose methods are the only record of dispatch / combine)
        guard = ("WHEN kind = 'op' THEN NULL WHEN regexp_matches(name, '\\.py\\(\\d+\\): ') "
                 "AND NOT regexp_matches(name, 'moe/token_dispatcher\\.py\\(\\d+\\): ') THEN NULL "
                 if annotations_only else "")
        return f"CAST(CASE {guard}{' '.join(parts)} END AS {typ})"

    sql = (sql_text("range_context")
           .replace("/*LAYER*/", case(layer, "INTEGER", True))
           .replace("/*STAGE*/", case(stage, "VARCHAR", True))
           .replace("/*PHASE*/", case(phase, "VARCHAR")))
    return sql, params


def infer_blocks(heads: list[dict]) -> dict[int, int]:
    """Layer ordinals for stage annotations without layer numbers: {head range id: layer}.

    `heads` come ordered per (rank, step, tid, phase, pass) by start time. Within one such
    sequence a new block starts where a name appears that the current block already holds
    (`attn(F) dispatch(F) mlp(F) combine(F) | attn(F) ...`), so blocks of different shape
    (dense and MoE layers) still split. Only sequences of two or more blocks whose first block
    holds two or more stage annotations are numbered: a single block is no repetition, and one
    annotation repeating (`MoE[...]` called three times) may be iterations as well as layers;
    their layer stays unknown. The `(W)` pass (one annotation per layer) is numbered when it has
    as many blocks as the backward pass it belongs to. Forward blocks are numbered
    0, 1, ... in order; backward blocks count down (backward runs the layers in reverse), so
    the backward of layer k gets the same ordinal as its forward."""
    out: dict[int, int] = {}
    seqs: dict = {}
    for h in heads:
        seqs.setdefault((h["rank"], h["step"], h["tid"], h["phase"], h["pass"]), []).append(h)
    numbered: dict = {}   # (rank, step, tid, phase) -> blocks numbered in its main pass
    for key in sorted(seqs, key=lambda k: (k[4] == "W",) + tuple(str(x) for x in k)):
        rank, step, tid, phase, pass_ = key
        blocks: list[list[int]] = []
        seen: set = set()
        for h in seqs[key]:
            if not blocks or h["name"] in seen:
                blocks.append([])
                seen = set()
            blocks[-1].append(h["id"])
            seen.add(h["name"])
        n = len(blocks)
        if pass_ == "W":   # one weight-gradient annotation per layer: numbered as its backward pass
            if numbered.get((rank, step, tid, phase)) != n:
                continue
        elif n < 2 or len(blocks[0]) < 2:   # no repetition, or not a block of stages
            continue
        else:
            numbered[(rank, step, tid, phase)] = n
        for i, ids in enumerate(blocks):
            for rid in ids:
                out[rid] = (n - 1 - i) if phase == "backward" else i
    return out


def prepare(session: Session, rules: Rules) -> None:
    """Materialize range_context (layer ordinals inferred where annotations carry none) and
    activity_attribution (needs breakdown.prepare first)."""
    import pyarrow as pa
    sql, params = _tag_sql(rules)
    session.create_table("range_context_raw", sql, **params)
    ordinals = infer_blocks(session.query("layer_heads").to_pylist())
    session.register("layer_blocks", pa.table({"id": pa.array(list(ordinals), pa.int64()),
                                               "layer": pa.array(list(ordinals.values()), pa.int32())}))
    session.create_table("range_context", """
        SELECT r.id, r.rank, r.tid, coalesce(r.layer, b.layer) AS layer, r.stage, r.phase, r.anchor,
               r.names_stage, r.head, (r.layer IS NULL AND b.layer IS NOT NULL) AS layer_inferred
        FROM range_context_raw r LEFT JOIN layer_blocks b ON b.id = r.head""")
    session.materialize("activity_attribution")


def layer_rows(session: Session) -> list[dict]:
    rows = session.query("layer_times").to_pylist()
    return rows


def attribution_summary(session: Session) -> dict:
    """How much GPU time could be attributed (counts and shares), backward linkage included, and
    how much was attributed across threads or got an inferred layer number."""
    r = session.rows("""
        SELECT t.region, t.is_backward, t.linked, t.cross_thread, t.cross_ambiguous, t.layer_inferred,
               count(*) AS n, sum(a.end_ns - a.start_ns)::BIGINT AS busy_ns
        FROM activity_attribution t JOIN gpu_activities a ON a.id = t.id
        WHERE t.step IS NOT NULL
        GROUP BY ALL""")
    total = sum(x["busy_ns"] for x in r) or 1
    bwd = [x for x in r if x["is_backward"]]
    bwd_total = sum(x["busy_ns"] for x in bwd) or 0
    # linked: through a forward op, or named by its own annotations (not across threads)
    bwd_linked = sum(x["busy_ns"] for x in bwd if x["linked"] or (x["region"] == "layer" and not x["cross_thread"]))
    un = [x for x in r if x["region"] == "unattributed"]
    cross = [x for x in r if x["cross_thread"]]
    inferred = [x for x in r if x["layer_inferred"] and x["region"] == "layer"]
    return {
        "activities": sum(x["n"] for x in r),
        "in_layers_share": sum(x["busy_ns"] for x in r if x["region"] == "layer") / total,
        "layer_unknown_share": sum(x["busy_ns"] for x in r if x["region"] == "layer_unknown") / total,
        "outside_layers_share": sum(x["busy_ns"] for x in r if x["region"] == "outside") / total,
        "unattributed_count": sum(x["n"] for x in un),
        "unattributed_share": sum(x["busy_ns"] for x in un) / total,
        "backward_linked_share": (bwd_linked / bwd_total) if bwd_total else None,
        "inferred_layer_share": sum(x["busy_ns"] for x in inferred) / total,
        "cross_thread": {
            "count": sum(x["n"] for x in cross),
            "busy_ns": sum(x["busy_ns"] for x in cross),
            "share": sum(x["busy_ns"] for x in cross) / total,
            "ambiguous_count": sum(x["n"] for x in r if x["cross_ambiguous"]),
        },
    }


COMM_SQL = """
WITH ops AS (SELECT * FROM comm_ops),
exposed AS (
    SELECT c.comm_kind, sum(s.exposed)::DOUBLE AS exposed_ns
    FROM ops c JOIN comm_exposure s ON s.id = c.id GROUP BY c.comm_kind
)
SELECT o.comm_kind AS kind, count(DISTINCT o.op_key) AS ops, count(*) AS count, sum(o.bytes)::BIGINT AS bytes,
       sum(o.end_ns - o.start_ns)::BIGINT AS total_ns,
       round(coalesce(any_value(e.exposed_ns), 0))::BIGINT AS exposed_ns
FROM ops o
JOIN activity_attribution t ON t.id = o.id AND t.step IS NOT NULL
LEFT JOIN exposed e ON e.comm_kind = o.comm_kind
GROUP BY o.comm_kind ORDER BY total_ns DESC
"""

COMM_EXPOSURE_SQL = """
WITH cover AS (SELECT rank, step, id, unnest(range(i0, i1)) AS seg FROM activity_spans WHERE class = 'comm')
SELECT v.id, sum(CASE WHEN s.c = 0 THEN (s.t_end - s.t) / s.m ELSE 0 END) AS exposed
FROM cover v JOIN segments s ON s.rank = v.rank AND s.step = v.step AND s.seg = v.seg
GROUP BY v.id
"""


def comm_rows(session: Session) -> list[dict]:
    session.materialize("comm_ops")
    session.create_table("comm_exposure", COMM_EXPOSURE_SQL)
    return session.rows(COMM_SQL)


def stage_totals(rows: list[dict]) -> list[dict]:
    """Per-stage totals over all layers, phases, steps and ranks (medians are per step below)."""
    out: dict = {}
    for r in rows:
        key = r["stage"]
        d = out.setdefault(key, {"stage": key, **{f: 0 for f in LAYER_FIELDS}})
        for f in LAYER_FIELDS:
            d[f] += r[f]
    return sorted(out.values(), key=lambda d: -d["step_time_ns"])
