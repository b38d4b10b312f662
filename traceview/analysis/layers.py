"""Per-layer, per-phase, per-MoE-stage attribution of GPU time, and communication by collective kind."""
from __future__ import annotations

from ..config import Rules
from ..db import Session, sql_text

LAYER_FIELDS = ("step_time_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns",
                "idle_ns", "comm_ns")


def _tag_sql(rules: Rules) -> tuple[str, dict]:
    """CASE expressions for the range tags; regexes travel as parameters, never as SQL text."""
    params: dict = {}
    layer = []
    for i, rx in enumerate(rules.layer):
        params[f"layer_{i}"] = rx
        layer.append(f"WHEN regexp_matches(name, $layer_{i}) "
                     f"THEN try_cast(regexp_extract(name, $layer_{i}, 1) AS INTEGER)")
    stage, phase = [], []
    for i, (rx, name) in enumerate(rules.stage):
        params[f"stage_{i}"], params[f"stage_name_{i}"] = rx, name
        stage.append(f"WHEN regexp_matches(name, $stage_{i}) THEN $stage_name_{i}")
    for i, (rx, name) in enumerate(rules.phase):
        params[f"phase_{i}"], params[f"phase_name_{i}"] = rx, name
        phase.append(f"WHEN regexp_matches(name, $phase_{i}) THEN $phase_name_{i}")

    def case(parts: list[str], typ: str, annotations_only: bool = False) -> str:
        if not parts:
            return f"CAST(NULL AS {typ})"
        # framework ops (aten::topk, MmBackward0, ...) name no layer or stage: only annotations,
        # NVTX ranges and module (python) ranges do
        guard = "WHEN kind = 'op' THEN NULL " if annotations_only else ""
        return f"CAST(CASE {guard}{' '.join(parts)} END AS {typ})"

    sql = (sql_text("range_context")
           .replace("/*LAYER*/", case(layer, "INTEGER", True))
           .replace("/*STAGE*/", case(stage, "VARCHAR", True))
           .replace("/*PHASE*/", case(phase, "VARCHAR")))
    return sql, params


def prepare(session: Session, rules: Rules) -> None:
    """Materialize range_context and activity_attribution (needs breakdown.prepare first)."""
    sql, params = _tag_sql(rules)
    session.create_table("range_context", sql, **params)
    session.materialize("activity_attribution")


def layer_rows(session: Session) -> list[dict]:
    rows = session.query("layer_times").to_pylist()
    return rows


def attribution_summary(session: Session) -> dict:
    """How much GPU time could be attributed (counts and shares), backward linkage included."""
    r = session.rows("""
        SELECT t.region, t.is_backward, t.linked, count(*) AS n, sum(a.end_ns - a.start_ns)::BIGINT AS busy_ns
        FROM activity_attribution t JOIN gpu_activities a ON a.id = t.id
        WHERE t.step IS NOT NULL
        GROUP BY ALL""")
    total = sum(x["busy_ns"] for x in r) or 1
    bwd = [x for x in r if x["is_backward"]]
    bwd_total = sum(x["busy_ns"] for x in bwd) or 0
    bwd_linked = sum(x["busy_ns"] for x in bwd if x["linked"] or x["region"] == "layer")
    un = [x for x in r if x["region"] == "unattributed"]
    return {
        "activities": sum(x["n"] for x in r),
        "in_layers_share": sum(x["busy_ns"] for x in r if x["region"] == "layer") / total,
        "outside_layers_share": sum(x["busy_ns"] for x in r if x["region"] == "outside") / total,
        "unattributed_count": sum(x["n"] for x in un),
        "unattributed_share": sum(x["busy_ns"] for x in un) / total,
        "backward_linked_share": (bwd_linked / bwd_total) if bwd_total else None,
    }


COMM_SQL = """
WITH ops AS (SELECT * FROM comm_ops),
exposed AS (
    SELECT c.comm_kind, sum(s.exposed)::DOUBLE AS exposed_ns
    FROM ops c JOIN comm_exposure s ON s.id = c.id GROUP BY c.comm_kind
)
SELECT o.comm_kind AS kind, count(*) AS count, sum(o.bytes)::BIGINT AS bytes,
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
