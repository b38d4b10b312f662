"""The FLOPs engine steps written in Python: the shape -> FLOP formulas (trace_flops.FORMULAS) and
the token count of an embedding call's shapes. What joins, nests and sums is SQL
(traceview/sql/flops_*.sql)."""
from __future__ import annotations

import json

import pyarrow as pa

from ..engine.steps import python_step
from .trace_flops import FORMULAS, op_dtype, shape_flops

_SIGNATURE = ("rank", "name", "input_dims", "concrete_inputs", "input_types")


@python_step("flops_shapes", scope="rank", requires=("cpu_ranges",), params=(),
             produces=_SIGNATURE + ("flops", "dtype"))
def flops_shapes(session, params) -> pa.Table:
    """One row per distinct (rank, op name, input dims, concrete inputs, input types) of the ops
    with a formula (missing text as ''): its FLOPs (null: no usable shapes) and input dtype.
    Computed on the signatures only: a few hundred, even for big traces."""
    sig = session.sql("SELECT DISTINCT rank, name, coalesce(input_dims, '') AS input_dims, coalesce(concrete_inputs, '') "
                      "AS concrete_inputs, coalesce(input_types, '') AS input_types FROM cpu_ranges "
                      "WHERE list_contains($names, name) ORDER BY ALL", names=sorted(FORMULAS))
    cols = {c: sig.column(c).to_pylist() for c in _SIGNATURE}
    flops = [shape_flops(n, d, c) for n, d, c in zip(cols["name"], cols["input_dims"], cols["concrete_inputs"])]
    dtype = [op_dtype(t) for t in cols["input_types"]]
    return pa.table({**{c: sig.column(c) for c in _SIGNATURE},
                     "flops": pa.array(flops, pa.float64()), "dtype": pa.array(dtype, pa.string())})


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
