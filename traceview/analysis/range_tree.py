"""range_context_raw: what each CPU range inherits from its ancestors (the parent_id tree).

For every CPU range reachable from a root (a range without parent) through parent_id links: the
layer, stage and phase named by itself or by its innermost tagged ancestor-or-self (what a range
names by itself comes from its name: the SQL step name_tags tags each distinct name once, and
`tags` gives those to the ranges through their names' dictionary codes, in the ranges' row
order); `anchor`: the innermost enclosing backward node, itself included; `names_stage`: the
range itself names a stage or a layer; `head`: for ranges inside a stage-naming annotation whose
context has no layer number, the outermost such annotation (the member of a repeating block that
`layer_blocks` numbers). Ranges whose parent chain ends at an id that is not a range (or never
ends) have no context and no row; nor do ranges that inherit nothing (no layer, stage, phase,
backward node or head): every reader joins this table (and range_context) by id, a range without a
row reading as one without context. On a trace whose annotations name no layer, stage or phase,
that is every range: nsys h100_2gpu_train_a2a x100's 1,911,800 NVTX ranges made 290 MiB of
range_context and range_context_raw for nothing (the run without them: 0.973 of the wall).

The inheritance is pointer doubling over the parent links, all in Arrow column kernels: after
round k each range holds the row index where a value was found on its 2^k nearest
ancestors-or-self and a link to its 2^k-th ancestor (the values are gathered once at the end),
so a tree of depth d takes about log2(d) rounds of `take`, with no per-range Python and no
recursive query (which joins once per level of the tree).

The ranges are read where the profile holds them (no query, no copy), in id order as the parsers
write them. Joined and sorted in SQL instead (a step of one row per range, then read back into
Arrow), the same tags took 0.51 s against 0.33 s on the 1,017,654 ranges of the ×34 Kineto trace."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..engine.session import Session
from ..engine.steps import python_step

PRODUCES = ("id", "rank", "tid", "layer", "stage", "phase", "anchor", "names_stage", "head")
_RULES = ("layer_regexes", "stage_regexes", "stage_names", "phase_regexes", "phase_names")
_RANGE_COLUMNS = ("id", "rank", "tid", "parent_id", "name", "kind", "seq")


def _positions(n: int) -> pa.Array:
    """0 .. n - 1 as int64 (an Arrow kernel, no Python loop)."""
    return pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), 1)


def _rows(val: pa.Array, pos: pa.Array) -> pa.Array:
    """Each row's own index where `val` is set, else null: the doubling moves indices, not values."""
    return pc.if_else(pc.is_valid(val), pos, pa.nulls(len(val), pa.int64()))


def inherit(parent: pa.Array, inner: dict[str, pa.Array], outer: dict[str, pa.Array],
            ) -> tuple[pa.Array, dict[str, pa.Array], dict[str, pa.Array]]:
    """Pointer doubling over `parent` (the row index of each row's parent; n for a root, n + 1 for
    a row whose parent is not a row). Returns whether each row reaches a root, and for each column
    of `inner` (`outer`) the index of the innermost (outermost) row on the path from the row up to
    its root where that column is set (null where none is)."""
    n = len(parent)
    root, lost = n, n + 1          # two sentinel rows: each its own parent, nothing set
    up = pa.concat_arrays([parent.cast(pa.int64()), pa.array([root, lost], pa.int64())])
    none, pos = pa.nulls(2, pa.int64()), _positions(n)
    # after round k: the index found on the segment of 2^k rows from the row up (`up` excluded)
    ins = {k: pa.concat_arrays([_rows(v, pos), none]) for k, v in inner.items()}
    outs = {k: pa.concat_arrays([_rows(v, pos), none]) for k, v in outer.items()}
    for _ in range(max(1, n).bit_length() + 1):   # 2^rounds > n: every path has ended
        ins = {k: pc.coalesce(v, pc.take(v, up)) for k, v in ins.items()}
        outs = {k: pc.coalesce(pc.take(v, up), v) for k, v in outs.items()}
        nxt = pc.take(up, up)
        done = pc.all(pc.equal(nxt, up)).as_py() is not False
        up = nxt
        if done:
            break
    reached = pc.equal(up.slice(0, n), root)
    return (reached, {k: v.slice(0, n) for k, v in ins.items()}, {k: v.slice(0, n) for k, v in outs.items()})


def _lookup(col: pa.ChunkedArray | pa.Array, values: pa.Array) -> pa.Array:
    """Each row's position in `values` (null where its value is null or absent), a dictionary-coded
    column looked up once per distinct value of each chunk."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out = []
    for c in chunks:
        if pa.types.is_dictionary(c.type):
            at = pc.index_in(c.dictionary, value_set=values.cast(c.dictionary.type), skip_nulls=True)
            out.append(at.take(c.indices))
        else:
            out.append(pc.index_in(c, value_set=values.cast(c.type), skip_nulls=True))
    return pa.concat_arrays(out) if out else pa.array([], pa.int32())


def tags(ranges: pa.Table, names: pa.Table) -> pa.Table:
    """What each range names by itself, in the rows of `ranges` (id, rank, tid, parent_id, name,
    kind, seq): the tags of its name (`names`: name_tags' rows; a name's tags are the same on every
    rank, so its first row gives them), the layer and stage dropped for a
    framework op (kind 'op') and for a `with_stack` frame; `bwd_node`: a backward node's name with a
    sequence number (null where the name has no tags, as a left join leaves it)."""
    n = ranges.num_rows
    at = _lookup(ranges.column("name"), names.column("name"))
    kinds = pa.array(["op"], pa.string())
    is_op = pc.is_valid(_lookup(ranges.column("kind"), kinds))
    frame = pc.fill_null(names.column("frame_only").take(at), False)
    drop = pc.or_(is_op, frame)
    return pa.table({
        "id": ranges.column("id"), "rank": ranges.column("rank"), "tid": ranges.column("tid"),
        "parent_id": ranges.column("parent_id"),
        "layer": pc.if_else(drop, pa.nulls(n, pa.int32()), names.column("layer").take(at).cast(pa.int32())),
        "stage": pc.if_else(drop, pa.nulls(n, pa.string()), names.column("stage").take(at).cast(pa.string())),
        "phase": names.column("phase").take(at).cast(pa.string()),
        "bwd_node": pc.and_kleene(pc.is_valid(ranges.column("seq")), names.column("bwd_name").take(at))})


def _ranges(session: Session) -> pa.Table:
    """The CPU ranges' columns `tags` reads, in id order: the profile's own table where the session
    queries it as attached (a parser writes it in id order; checked), else a query."""
    table = session.attached("cpu_ranges")
    if table is not None:
        table = table.select(list(_RANGE_COLUMNS))
        ids = table.column("id")
        if len(ids) < 2 or pc.all(pc.greater(ids.slice(1), ids.slice(0, len(ids) - 1))).as_py():
            return table
    return session.sql(f"SELECT {', '.join(_RANGE_COLUMNS)} FROM cpu_ranges ORDER BY id")


def context(tags: pa.Table) -> pa.Table:
    """range_context_raw's rows from the ranges' own tags (`tags`; ids unique: traceview/schema.py)."""
    return pa.Table.from_batches(context_batches(tags))


BATCH_ROWS = 1 << 18   # input rows per record batch of the result


def context_batches(tags: pa.Table, rows: int = BATCH_ROWS) -> list[pa.RecordBatch]:
    """`context`'s rows as record batches (in row order), each gathered straight from the inputs
    into its own buffers: no whole unfiltered result is made. Where no range names anything by
    itself (a name that tags a stage may name only ops, which drop it: `tags`), none inherits
    anything: no row, and the rounds are not run."""
    if names_nothing(tags, "bwd_node"):
        tags = tags.slice(0, 0)
    ids = tags.column("id").combine_chunks()
    n = len(ids)
    pid = tags.column("parent_id").combine_chunks()
    pos = _positions(n)
    first = ids[0].as_py() if n else 0
    if n and pc.all(pc.equal(ids, pc.add(pos, first))).as_py():
        # ids are consecutive in row order (as the parsers number them): a parent's row is its id
        # minus the first (an id outside them is no row)
        at = pc.subtract(pid, first)
        at = pc.if_else(pc.and_(pc.greater_equal(at, 0), pc.less(at, n)), at, pa.nulls(n, pa.int64()))
    else:
        at = pc.index_in(pid, value_set=ids)
    parent = pc.if_else(pc.is_null(pid), n, pc.if_else(pc.is_null(at), n + 1, at.cast(pa.int64())))
    del pid, at, pos
    layer, stage = tags.column("layer").combine_chunks(), tags.column("stage").combine_chunks()
    phase = tags.column("phase").combine_chunks()
    bwd = pc.fill_null(tags.column("bwd_node").combine_chunks(), False)
    anchor = pc.if_else(bwd, ids, pa.nulls(n, ids.type))
    reached, src, _ = inherit(parent, {"layer": layer, "stage": stage, "phase": phase, "anchor": anchor}, {})
    del anchor, bwd
    # head: the outermost range on the path that names a stage and whose context has no layer
    got_layer = pc.take(layer, src["layer"])
    cand = pc.if_else(pc.and_(pc.is_valid(stage), pc.is_null(got_layer)), ids, pa.nulls(n, ids.type))
    del got_layer
    _, _, out = inherit(parent, {}, {"head": cand})
    del cand, parent
    names_stage = pc.or_(pc.is_valid(layer), pc.is_valid(stage))
    rank, tid = tags.column("rank").combine_chunks(), tags.column("tid").combine_chunks()
    # a row where the range reaches a root and inherits something (a range naming a stage or a
    # layer inherits it from itself)
    some = pc.or_(pc.or_(pc.is_valid(src["layer"]), pc.is_valid(src["stage"])),
                  pc.or_(pc.or_(pc.is_valid(src["phase"]), pc.is_valid(src["anchor"])), pc.is_valid(out["head"])))
    keep = pc.and_(reached, some)
    del some, reached
    batches = []
    for lo in range(0, max(n, 1), rows):
        # the rows of this slice kept, as indices into the inputs
        sel = pc.add(pc.indices_nonzero(keep.slice(lo, rows)), pa.scalar(lo, pa.uint64())).cast(pa.int64())
        batches.append(pa.record_batch({
            "id": pc.take(ids, sel), "rank": pc.take(rank, sel), "tid": pc.take(tid, sel),
            "layer": pc.take(layer, pc.take(src["layer"], sel)),
            "stage": pc.take(stage, pc.take(src["stage"], sel)),
            "phase": pc.take(phase, pc.take(src["phase"], sel)),
            "anchor": pc.take(ids, pc.take(src["anchor"], sel)),
            "names_stage": pc.take(names_stage, sel), "head": pc.take(ids, pc.take(out["head"], sel))}))
    return batches


def names_nothing(names: pa.Table, bwd: str = "bwd_name") -> bool:
    """Whether no row of `names` (name_tags' rows, or the ranges' own `tags` with bwd="bwd_node")
    tags anything: no layer, stage or phase, and no backward node. Then no range inherits anything,
    and range_context_raw has no row."""
    return all(names.column(c).null_count == names.num_rows for c in ("layer", "stage", "phase")) \
        and not pc.any(pc.fill_null(names.column(bwd), False)).as_py()


@python_step("range_context_raw", scope="rank", requires=("name_tags", "cpu_ranges"), params=_RULES,
             produces=PRODUCES)
def range_context_raw(session: Session, params: dict) -> pa.Table:
    """The CPU ranges with what they name (`tags`) and inherit along parent_id (`context`), kept as
    Arrow (the session's queries read it in place). The rounds' arrays go back to the system before
    the next step allocates (Arrow's pool keeps freed blocks otherwise: +280 MB of peak at x100 of
    the a2a export, measured). Where no range name tags anything (`names_nothing`: the a2a export's
    NVTX ranges, 1,911,800 at x100), no range is read: the same empty table, made from none."""
    names = session.sql("SELECT * FROM name_tags")
    ranges = session.sql(f"SELECT {', '.join(_RANGE_COLUMNS)} FROM cpu_ranges LIMIT 0") if names_nothing(names) \
        else _ranges(session)
    out = context(tags(ranges, names))
    pa.default_memory_pool().release_unused()
    return out
