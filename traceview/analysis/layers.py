"""Per-layer, per-phase, per-MoE-stage attribution of GPU time, and communication by collective kind."""
from __future__ import annotations

import pyarrow as pa

from ..config import Rules
from ..document import packed
from ..engine.pipeline import build, start as start_step
from ..engine.session import Session
from ..engine.steps import python_step
from . import range_tree  # noqa: F401  (declares the Python step range_context_raw)

LAYER_FIELDS = ("step_time_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns",
                "idle_ns", "comm_ns")


def rule_params(rules: Rules) -> dict:
    """The attribution rules as the list parameters of range_context_raw (regexes as data, never SQL text)."""
    return {"layer_regexes": list(rules.layer),
            "stage_regexes": [rx for rx, _ in rules.stage], "stage_names": [n for _, n in rules.stage],
            "phase_regexes": [rx for rx, _ in rules.phase], "phase_names": [n for _, n in rules.phase]}


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


@python_step("layer_blocks", scope="rank", requires=("layer_heads",), produces=("id", "rank", "layer"))
def layer_blocks(session: Session, params: dict) -> pa.Table:
    """Layer ordinals of the heads of repeating stage blocks (`infer_blocks`)."""
    heads = session.rows("SELECT * FROM layer_heads ORDER BY rank, step, tid, phase, pass, start_ns, id")
    ordinals = infer_blocks(heads)
    rank = {h["id"]: h["rank"] for h in heads}
    return pa.table({"id": pa.array(list(ordinals), pa.int64()),
                     "rank": pa.array([rank[i] for i in ordinals], pa.int32()),
                     "layer": pa.array(list(ordinals.values()), pa.int32())})


def start(session: Session, rules: Rules) -> None:
    """Begin range_context_raw (Arrow compute over every CPU range) on a thread now, its name_tags
    built first, so that it runs while the breakdown's queries run here (engine/pipeline.start);
    `prepare` takes it. Where the session's steps each run on one thread (a small trace: the second
    core idle), name_tags is made on that thread too."""
    start_step(session, "range_context_raw", rule_params(rules), chain=session.one_thread_each())


def prepare(session: Session, rules: Rules) -> None:
    """Build range_context (layer ordinals inferred where annotations carry none) and
    activity_attribution (after breakdown.prepare, which chose the step rule).

    Built in three calls: each `build` first drops the intermediates whose consumers are all
    built (engine/pipeline.free_transient), so name_tags is gone before the layer heads and
    range_context are made, and range_context_raw (a copy of every CPU range's context) before
    activity_attribution, the largest query of the analysis, runs beside it."""
    params = rule_params(rules)
    for target in ("range_context_raw", "range_context", "activity_attribution"):
        build(session, [target], params)


LAYER_ORDER = "rank, step, layer NULLS LAST, phase, stage, region"      # the report's order of layer rows


def layer_rows(session: Session, spill: str | None = None, maps: list | None = None, release=None) -> list[dict]:
    """The layer_times rows in report order: a list of dicts, or when long PackedRows (packed from
    the result read a chunk at a time: neither the whole list of dicts nor the whole Arrow result
    is made), its chunks written to the file `spill` where given (packed.pack_reader, with
    `release`).

    layer_times is built in this order (its SQL ends in ORDER BY LAYER_ORDER). On a mapped job each
    batch of files built its own rows, in order, and the batches are concatenated in file order;
    a rank lies in one file (load.place gives every file's ranks their own numbers), so the whole
    is in order wherever its ranks are: then the rows are read as they lie, without a sort (on a
    1,024-rank job DuckDB's sort of some 200k rows added about 55 MiB to the parent's peak)."""
    build(session, ["layer_times"])
    joined = _joined_parts(session)
    if joined is not None:
        return joined
    sql = "SELECT * FROM layer_times" + ("" if _in_rank_order(session) else f" ORDER BY {LAYER_ORDER}")
    if session.rows("SELECT count(*) AS n FROM layer_times")[0]["n"] < packed.MIN_ROWS:
        return session.rows(sql)
    from ..duck import query_reader
    rows = packed.pack_reader(query_reader(session.con, sql, packed.CHUNK), spill, maps, release)
    return session.rows(sql) if rows is None else rows


def _joined_parts(session: Session):
    """A mapped job's layer rows as its workers packed them, batch after batch (mapped._layer_part:
    the rows of each batch's layer_times as they lie, as the parent adopted them): the rows read
    below where they are in rank order (read as they lie) and long enough to be packed; else None."""
    remote = getattr(session.profile, "remote", None) if session.profile is not None else None
    parts = getattr(remote, "layer_parts", None)
    if not parts or any(p is None for p in parts) or sum(map(len, parts)) < packed.MIN_ROWS \
            or not _in_rank_order(session):
        return None
    return packed.concatenated(parts)


def _in_rank_order(session: Session) -> bool:
    """Whether layer_times' rows, as a scan reads them, have their ranks in ascending order."""
    import pyarrow.compute as pc
    rank = session.sql("SELECT rank FROM layer_times").column("rank")
    n = len(rank)
    return n < 2 or bool(pc.all(pc.less_equal(rank.slice(0, n - 1), rank.slice(1))).as_py())


def attribution_summary(session: Session) -> dict:
    """How much GPU time could be attributed (counts and shares), backward linkage included, and
    how much was attributed across threads or got an inferred layer number."""
    build(session, ["attribution_groups"])
    r = session.rows("SELECT * FROM attribution_groups")
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


def comm_rows(session: Session) -> list[dict]:
    build(session, ["comm_summary"])
    return session.rows("SELECT * FROM comm_summary ORDER BY total_ns DESC, kind")


def stage_totals(session: Session) -> list[dict]:
    """Per-stage totals over all layers, phases, steps and ranks (medians are per step below),
    the largest step time first, ties in the order the stages first come in the layer rows
    (layer_rows' order: by rank, then the rank's own order, stage_totals_rank's first_pos).
    The sums of the per-rank sums (stage_totals_rank): the layer rows are neither decoded nor
    sorted here (a 1,024-rank job has some 200k of them, held packed)."""
    build(session, ["stage_totals_rank"])
    sums = ", ".join(f"sum({f})::BIGINT AS {f}" for f in LAYER_FIELDS)
    return session.rows(f"""
        SELECT stage, {sums}
        FROM stage_totals_rank
        GROUP BY stage ORDER BY step_time_ns DESC, min(rank), arg_min(first_pos, rank)""")
