"""The FLOPs engine steps written in Python: the shape -> FLOP formulas (trace_flops.FORMULAS), the
token count of an embedding call's shapes, the kernel-name families and the precision rules
(precision.py): functions of a name or a shape string, applied per row or per distinct value. What
joins, nests and splits is SQL (traceview/sql/flops_*.sql); the FLOPs sums are exact (math.fsum)."""
from __future__ import annotations

import json

import pyarrow as pa

from ..engine.steps import python_step
from .precision import input_precision, kernel_precision, op_kind, op_precision
from .trace_flops import FORMULAS, op_dtype, shape_flops

_SIGNATURE = ("rank", "name", "input_dims", "concrete_inputs", "input_types")


@python_step("flops_shapes", scope="rank", requires=("cpu_ranges",), params=(),
             produces=_SIGNATURE + ("flops", "dtype"))
def flops_shapes(session, params) -> pa.Table:
    """One row per distinct (rank, op name, input dims, concrete inputs, input types) of the ops
    with a formula (missing text as ''): its FLOPs (null: no usable shapes) and input dtype.
    Computed on the signatures only: a few hundred, even for big traces."""
    sig = session.sql("SELECT DISTINCT rank, name, coalesce(input_dims, '') AS input_dims, "
                      "coalesce(concrete_inputs, '') AS concrete_inputs, coalesce(input_types, '') AS input_types "
                      "FROM cpu_ranges "
                      "WHERE list_contains($names, name) ORDER BY ALL", names=sorted(FORMULAS))
    cols = {c: sig.column(c).to_pylist() for c in _SIGNATURE}
    flops = [shape_flops(n, d, c)
             for n, d, c in zip(cols["name"], cols["input_dims"], cols["concrete_inputs"], strict=True)]
    dtype = [op_dtype(t) for t in cols["input_types"]]
    return pa.table({**{c: sig.column(c) for c in _SIGNATURE},
                     "flops": pa.array(flops, pa.float64()), "dtype": pa.array(dtype, pa.string())})


@python_step("flops_shaped_ops", scope="rank", requires=("cpu_ranges",), params=(), produces=("rank", "ops", "shaped"))
def flops_shaped_ops(session, params) -> pa.Table:
    """Per rank: its op ranges and how many of them record input shapes (whether the trace was
    recorded with record_shapes)."""
    return session.sql("SELECT rank, count(*) AS ops, count(input_dims) AS shaped FROM cpu_ranges "
                       "WHERE kind = 'op' GROUP BY rank ORDER BY rank")


def embedding_tokens(input_dims: str | None) -> int | None:
    """Tokens of one `aten::embedding` call: the element count of its second input ([vocab, d],
    [B, T] -> B*T), or None when the shapes do not say."""
    try:
        dims = json.loads(input_dims) if input_dims else None
    except ValueError:
        return None
    if not isinstance(dims, list) or len(dims) < 2 or not isinstance(dims[1], list):
        return None
    idx = dims[1]
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in idx):
        return None
    out = 1
    for x in idx:
        out *= x
    return out


@python_step("flops_embedding_tokens", scope="rank", requires=("cpu_ranges",), params=(),
             produces=("rank", "id", "start_ns", "tokens"))
def flops_embedding_tokens(session, params) -> pa.Table:
    """The `aten::embedding` calls with recorded shapes and the tokens each looks up."""
    emb = session.sql("SELECT rank, id, start_ns, input_dims FROM cpu_ranges "
                      "WHERE name = 'aten::embedding' AND input_dims IS NOT NULL ORDER BY rank, id")
    tok = [embedding_tokens(d) for d in emb.column("input_dims").to_pylist()]
    keep = pa.array([t is not None for t in tok], pa.bool_())
    out = pa.table({"rank": emb.column("rank"), "id": emb.column("id"), "start_ns": emb.column("start_ns"),
                    "tokens": pa.array(tok, pa.int64())})
    return out.filter(keep)


@python_step("flops_kernel_info", scope="rank", requires=("flops_kernels", "gpu_activities"), params=(),
             produces=("rank", "name", "family", "category", "kdtype"))
def flops_kernel_info(session, params) -> pa.Table:
    """Per distinct kernel name of the counted ops' kernels: its family (diff/families.py), compute
    category (gemm / attention / conv; null for other kernels) and the math type its name shows."""
    from ..diff.families import family  # (its ~50 patterns compiled only where a kernel is counted)
    names = session.sql("SELECT DISTINCT k.rank, coalesce(g.name, '') AS name FROM flops_kernels k "
                        "LEFT JOIN gpu_activities g ON g.id = k.id ORDER BY ALL")
    info = [(family(n).key,) + kernel_precision(n) for n in names.column("name").to_pylist()]
    return pa.table({"rank": names.column("rank"), "name": names.column("name"),
                     "family": pa.array([i[0] for i in info], pa.string()),
                     "category": pa.array([i[1] for i in info], pa.string()),
                     "kdtype": pa.array([i[2] for i in info], pa.string())})


@python_step("flops_op_precision", scope="rank", requires=("flops_op_inputs",), params=(),
             produces=("rank", "step", "id", "name", "flops", "precision", "precision_source", "kind",
                       "kernel_precision"))
def flops_op_precision(session, params) -> pa.Table:
    """The precision each counted op of a step ran in and what said so (precision.op_precision:
    the op, its compute kernel, its input types, or assumed bf16), and its kind of work."""
    # decided per distinct (name, input types, kernel precision), a few signatures even for big
    # traces, and spread over the ops by each op's signature number (the same order in both queries)
    sigs = session.sql("SELECT DISTINCT name, input_types, kernel_precision FROM flops_op_inputs ORDER BY ALL")
    decided = [(*op_precision(n, input_precision(i), k), op_kind(n)) for n, i, k in
               zip(*(sigs.column(c).to_pylist() for c in ("name", "input_types", "kernel_precision")), strict=True)]
    t = session.sql("SELECT rank, step, id, name, flops, kernel_precision, "
                    "dense_rank() OVER (ORDER BY name, input_types, kernel_precision) - 1 AS sig "
                    "FROM flops_op_inputs ORDER BY rank, step, id")
    sig = t.column("sig")

    def spread(j: int) -> pa.ChunkedArray:
        return pa.array([d[j] for d in decided], pa.string()).take(sig)
    return pa.table({"rank": t.column("rank"), "step": t.column("step"), "id": t.column("id"), "name": t.column("name"),
                     "flops": t.column("flops"), "precision": spread(0), "precision_source": spread(1),
                     "kind": spread(2), "kernel_precision": t.column("kernel_precision").cast(pa.string())})


def _exact_sums(table: pa.Table) -> pa.Table:
    """`table` with its list column `terms` replaced by `flops`, each list's exact sum (math.fsum:
    correctly rounded, so the same float whatever order the rows come in, on one process or on the
    workers of a mapped job; null where the list holds no number, as SQL's sum)."""
    import math
    sums = []
    for terms in table.column("terms").to_pylist():
        vals = [v for v in terms if v is not None]
        sums.append(math.fsum(vals) if vals else None)
    i = table.column_names.index("terms")
    return table.set_column(i, "flops", pa.array(sums, pa.float64()))


@python_step("flops_steps", scope="rank", requires=("flops_step_ops",), params=(),
             produces=("rank", "step", "flops", "ops"))
def flops_steps(session, params) -> pa.Table:
    """Per rank and step, the FLOPs of its counted ops (their exact sum) and how many there are."""
    return _exact_sums(session.sql("SELECT rank, step, list(flops) AS terms, count(*) AS ops FROM flops_step_ops "
                                   "GROUP BY rank, step ORDER BY rank, step"))


@python_step("flops_groups", scope="job", requires=("flops_kernels", "activity_attribution"), params=(),
             produces=("layer", "phase", "stage", "flops"))
def flops_groups(session, params) -> pa.Table:
    """The kernel FLOPs (flops_kernels, exact sums) of each (layer, phase, stage) that the
    attribution gives their kernels, over all ranks and steps (kernels outside every step left out)."""
    return _exact_sums(session.sql("SELECT a.layer, a.phase, a.stage, list(k.flops) AS terms "
                                   "FROM activity_attribution a JOIN flops_kernels k USING (id) "
                                   "WHERE a.step IS NOT NULL GROUP BY a.layer, a.phase, a.stage "
                                   "ORDER BY a.layer NULLS LAST, a.phase, a.stage"))
