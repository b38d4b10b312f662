"""The loaded profile: one dataclass holding the canonical tables of all ranks of one job."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from . import schema

# columns holding ids of rows in some table (renumbered together when profiles are merged)
_ID_COLUMNS = {
    "gpu_activities": ["id", "launch_id", "op_id"],
    "cpu_ranges": ["id", "parent_id", "fwd_id"],
    "launches": ["id", "op_id"],
    "syncs": ["id"],
}


@dataclass
class Profile:
    gpu_activities: pa.Table
    cpu_ranges: pa.Table
    launches: pa.Table
    syncs: pa.Table
    meta: pa.Table
    warnings: list[str] = field(default_factory=list)
    # a mapped job's builder of per-rank steps on workers (traceview/mapped.py; engine/pipeline.py calls it)
    remote: Any = field(default=None, repr=False, compare=False)

    def tables(self) -> dict[str, pa.Table]:
        return {name: getattr(self, name) for name in schema.TABLES}

    @property
    def ranks(self) -> list[int]:
        return sorted(self.meta.column("rank").to_pylist())

    @property
    def world_size(self) -> int:
        ws = [w for w in self.meta.column("world_size").to_pylist() if w]
        return max(ws + [len(self.ranks)])

    @classmethod
    def empty(cls) -> Profile:
        return cls(**{name: schema.empty(name) for name in schema.TABLES})

    def with_rank(self, old: int, new: int) -> Profile:
        """Renumber rank `old` as `new` in every table."""
        return self.map_ranks({old: new})

    def map_ranks(self, mapping: dict[int, int]) -> Profile:
        """Renumber ranks by `mapping` (old -> new; ranks not in it keep their number), all at once."""
        olds = pa.array(list(mapping), pa.int32())
        news = pa.array(list(mapping.values()), pa.int32())
        out = {}
        for name in schema.TABLES:
            t = getattr(self, name)
            col = t.column("rank")
            idx = pc.index_in(col, value_set=olds)
            newcol = pc.if_else(pc.is_valid(idx), pc.take(news, idx), col)
            out[name] = t.set_column(t.schema.get_field_index("rank"), t.schema.field("rank"), newcol)
        return Profile(**out, warnings=list(self.warnings))


def max_id(tables: dict[str, pa.Table]) -> int:
    """The largest row id over the tables with ids (-1 when they are empty)."""
    m = -1
    for name in _ID_COLUMNS:
        t = tables[name]
        if t.num_rows:
            v = pc.max(t.column("id")).as_py()
            m = max(m, -1 if v is None else v)
    return m


def _shift(t: pa.Table, cols: list[str], offset: int) -> pa.Table:
    if offset == 0:
        return t
    for c in cols:
        i = t.schema.get_field_index(c)
        t = t.set_column(i, t.schema.field(c), pc.add(t.column(c), pa.scalar(offset, pa.int64())))
    return t


def merge(profiles: list[Profile]) -> Profile:
    """Concatenate profiles (ranks of one job), renumbering ids so they stay unique."""
    if len(profiles) == 1:
        return profiles[0]
    parts: dict[str, list[pa.Table]] = {name: [] for name in schema.TABLES}
    warnings: list[str] = []
    offset = 0
    for p in profiles:
        for name in schema.TABLES:
            t = getattr(p, name)
            if name in _ID_COLUMNS:
                t = _shift(t, _ID_COLUMNS[name], offset)
            parts[name].append(t)
        warnings.extend(p.warnings)
        offset += max_id(p.tables()) + 1
    return Profile(**{n: pa.concat_tables(ts) for n, ts in parts.items()}, warnings=warnings)
