"""range_context_raw's inheritance (traceview/analysis/range_tree.py, pointer doubling) against a
plain walk up the parent links, range by range, on random forests with deep chains, ranges whose
parent is missing and parent cycles."""
import random

import pyarrow as pa

from traceview.analysis.range_tree import context, context_batches


def _walk(rows: dict[int, dict]) -> dict[int, tuple]:
    """The context of each range reachable from a root that inherits something, by following its
    parents one at a time."""
    out = {}
    for i in rows:
        path, cur, seen = [], i, set()
        while cur is not None and cur in rows and cur not in seen:
            seen.add(cur)
            path.append(rows[cur])
            cur = rows[cur]["parent_id"]
        if cur is not None:        # a missing parent or a cycle: never reached from a root
            continue
        layer, stage, phase = (next((r[key] for r in path if r[key] is not None), None)
                               for key in ("layer", "stage", "phase"))
        anchor = next((r["id"] for r in path if r["bwd_node"]), None)
        # head: outermost range on the path naming a stage whose own context has no layer
        head = None
        for k in range(len(path) - 1, -1, -1):
            r = path[k]
            ctx_layer = next((q["layer"] for q in path[k:] if q["layer"] is not None), None)
            if r["stage"] is not None and ctx_layer is None:
                head = r["id"]
                break
        if layer is None and stage is None and phase is None and anchor is None and head is None:
            continue               # inherits nothing: no row
        me = rows[i]
        out[i] = (layer, stage, phase, anchor,
                  me["layer"] is not None or me["stage"] is not None, head)
    return out


def _forest(rng: random.Random, n: int, dense: bool) -> list[dict]:
    # dense: ids consecutive in row order, as the parsers number them (the parent's row is found by
    # arithmetic); else scattered ids in shuffled rows (found by lookup)
    ids = list(range(10, 10 + n)) if dense else rng.sample(range(10, 10 * n + 10), n)
    rows = []
    for k, i in enumerate(ids):
        roll = rng.random()
        if k == 0 or roll < 0.1:
            parent = None
        elif roll < 0.13:
            parent = rng.choice([5, 10 + n])        # no such range
        elif roll < 0.16:
            parent = rng.choice(ids)                # any range: may close a cycle
        else:
            parent = ids[rng.randrange(max(0, k - 3), k)]   # a recent range: deep chains
        rows.append(dict(id=i, rank=0, tid=1 + k % 2, parent_id=parent,
                         layer=rng.choice([None, None, None, 1, 2]),
                         stage=rng.choice([None, None, "dispatch", "experts"]),
                         phase=rng.choice([None, None, None, "forward", "backward"]),
                         bwd_node=rng.choice([False, False, True, None])))
    if not dense:
        rng.shuffle(rows)
    return rows


_TYPES = pa.schema([("id", pa.int64()), ("rank", pa.int32()), ("tid", pa.int64()), ("parent_id", pa.int64()),
                    ("layer", pa.int32()), ("stage", pa.string()), ("phase", pa.string()), ("bwd_node", pa.bool_())])


def test_doubling_matches_a_walk_up_the_parents():
    rng = random.Random(7)
    for n in (1, 2, 5, 40, 300):
        for k in range(6):
            rows = _forest(rng, n, dense=k % 2 == 0)
            got = context(pa.Table.from_pylist(rows, schema=_TYPES)).to_pylist()
            want = _walk({r["id"]: r for r in rows})
            assert {r["id"]: (r["layer"], r["stage"], r["phase"], r["anchor"], r["names_stage"], r["head"])
                    for r in got} == want
            assert len(got) == len(want)


def test_a_chain_deeper_than_any_round_count_guess():
    n = 1000   # one chain: the innermost tag is 999 links up for the last range
    rows = [dict(id=i, rank=0, tid=1, parent_id=i - 1 if i else None, layer=7 if i == 0 else None,
                 stage=None, phase=None, bwd_node=False) for i in range(n)]
    got = context(pa.Table.from_pylist(rows, schema=_TYPES)).to_pylist()
    assert len(got) == n and {r["layer"] for r in got} == {7}


def test_no_rows():
    got = context(_TYPES.empty_table())
    assert got.num_rows == 0 and got.column_names[-1] == "head"


def test_batches_of_any_size_give_the_same_rows():
    # context_batches gathers each slice of input rows on its own: small slices (the last one
    # short, some slices with no row reaching a root) give the rows of the walk, in row order
    rng = random.Random(11)
    rows = _forest(rng, 200, dense=False)
    tags = pa.Table.from_pylist(rows, schema=_TYPES)
    want = _walk({r["id"]: r for r in rows})
    kept = [r["id"] for r in rows if r["id"] in want]      # input order, unreached and empty rows left out
    for size in (1, 7, 64, 199, 200, 1000):
        batches = context_batches(tags, rows=size)
        assert len(batches) == -(-200 // size)
        got = pa.Table.from_batches(batches).to_pylist()
        assert [r["id"] for r in got] == kept
        assert {r["id"]: (r["layer"], r["stage"], r["phase"], r["anchor"], r["names_stage"], r["head"])
                for r in got} == want


