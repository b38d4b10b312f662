"""The collectives of a job matched across ranks (collectives.match), held as arrays: a small head
per collective (kind, group, index, step, ..., straggler, skew) and one row per (collective, rank)
in int64 arrays (rank, aligned arrival, duration, wait, wait_until), some 40 bytes a row where the
dicts of the document's per-rank maps take several hundred.

Three views read them:
- `rows()`: the document's `collectives` as PackedRows whose chunks are encoded from the arrays
  when they are read (a few collectives at a time), so the writers see the same dicts;
- `by_id()`: activity id -> its collective's head with `wait_ns` of the id's own rank, and
  `wait_until()`: activity id -> the latest arrival on that id's rank clock. Both are Mappings
  over the ids sorted; `range(lo, hi)` cuts the part a batch of ranks needs (ids are renumbered
  by file, so a batch's ids lie in one range); a lookup builds a dict of the part's ids on first
  use (in a worker, over its batch only).
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..document.packed import CHUNK, MIN_ROWS, PackedRows, chunk_index, packable
from ..plain_data import scan

ENTRIES_PER_CHUNK = 16384      # per-rank entries (each of three maps) in one chunk of `rows()`
HEAD_BEFORE = ("kind", "group", "index", "step", "layer", "phase", "stage", "ranks")
HEAD_AFTER = ("earliest_rank", "earliest_ns", "latest_ns", "straggler", "skew_ns", "imbalance")

_encode = msgspec.msgpack.Encoder().encode


def _arrow(values: array) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _q(a: pa.Array) -> array:
    out = array("q")
    a = a.cast(pa.int64())
    if len(a):
        out.frombytes(memoryview(a.buffers()[1]).cast("q")[a.offset:a.offset + len(a)].tobytes())
    return out


class Matched:
    """The collectives as they are matched: `add` one at a time (rows in rank order), then
    `index_ids` with each collective's activity ids."""

    def __init__(self) -> None:
        self.heads: list[dict] = []
        self.bounds = array("q", [0])        # collective j's rows: bounds[j]:bounds[j + 1]
        # one row per (collective, rank): int64 arrays (lists of Python ints past int64)
        self.rank: array | list = array("q")
        self.start: array | list = array("q")
        self.dur: array | list = array("q")
        self.wait: array | list = array("q")
        self.until: array | list = array("q")
        self.total_wait: list[int] = []       # per collective: the sum of its ranks' waits
        self.ids = array("q")                # the rows' activity ids, sorted
        self.id_row = array("q")             # the row of each sorted id

    def add(self, head: dict, rk: list[int], arrival: list[int], dur: list[int], wait: list[int],
            until: list[int]) -> None:
        self.heads.append(head)
        cols: tuple = (rk, arrival, dur, wait, until)
        if type(self.start) is array:
            try:
                cols = tuple(array("q", c) for c in cols)
            except OverflowError:       # times past int64 (offsets far apart): Python ints from now on
                self.rank, self.start, self.dur, self.wait, self.until = (
                    list(c) for c in (self.rank, self.start, self.dur, self.wait, self.until))
        for have, c in zip((self.rank, self.start, self.dur, self.wait, self.until), cols, strict=True):
            have.extend(c)
        self.bounds.append(len(self.rank))
        self.total_wait.append(sum(wait))

    def index_ids(self, ids_of: list) -> None:
        """Each collective's ids (in its rows' order), sorted once for the lookups (a stable sort:
        an id found twice maps to its later collective, as a dict updated in order would)."""
        ids = array("q")
        for v in ids_of:
            ids.frombytes(memoryview(v).cast("B"))
        a = _arrow(ids)
        order = pc.sort_indices(a)
        self.ids, self.id_row = _q(pc.take(a, order)), _q(order)

    def _by_rows(self, values: array | list) -> array | list:
        if type(values) is not array:
            return [values[r] for r in self.id_row]
        return _q(pc.take(_arrow(values), _arrow(self.id_row)))

    def wait_until(self) -> WaitUntil:
        return WaitUntil(self.ids, self._by_rows(self.until))

    def by_id(self) -> ById:
        coll = array("q", bytes(8 * len(self.rank)))
        b = self.bounds
        for j in range(len(self.heads)):
            coll[b[j]:b[j + 1]] = array("q", [j]) * (b[j + 1] - b[j])
        return ById(self.heads, self.ids, self._by_rows(coll), self._by_rows(self.rank), self._by_rows(self.wait))

    def row(self, j: int, names: dict[int, str]) -> dict:
        """Collective j as the document writes it."""
        h = self.heads[j]
        a, b = self.bounds[j], self.bounds[j + 1]
        keys = [names[k] for k in self.rank[a:b]]
        out = {k: h[k] for k in HEAD_BEFORE}
        out["start_ns"] = dict(zip(keys, self.start[a:b], strict=True))
        out["dur_ns"] = dict(zip(keys, self.dur[a:b], strict=True))
        out["wait_ns"] = dict(zip(keys, self.wait[a:b], strict=True))
        for k in HEAD_AFTER:
            out[k] = h[k]
        return out

    def rows(self) -> Sequence[dict]:
        """The document's `collectives`: PackedRows encoded from the arrays as they are read (a
        list of the dicts where they hold fewer than MIN_ROWS (collective, rank) rows, or where
        some head would not come back from msgpack exactly)."""
        names = {k: str(k) for k in set(self.rank)}
        n = len(self.heads)
        shape = scan(self.heads)
        if len(self.rank) < MIN_ROWS or not packable(self.heads, shape):
            return [self.row(j, names) for j in range(n)]
        widest = max(self.bounds[j + 1] - self.bounds[j] for j in range(n))
        per = max(1, min(CHUNK, ENTRIES_PER_CHUNK // widest))
        return PackedRows(_Chunks(self, names, per), n, shape, per)

    def stragglers(self, ranks: list[int]) -> list[dict]:
        """collectives.stragglers of the rows, from the heads and each collective's total wait (the
        straggler's own wait is 0: what it caused is the collective's whole wait)."""
        mine: dict[int, list[int]] = {}
        for j, h in enumerate(self.heads):
            if h["skew_ns"] > 0:
                mine.setdefault(h["straggler"], []).append(j)
        out = []
        for rank in ranks:
            js = mine.get(rank, [])
            out.append({"rank": rank, "times_last": len(js), "collectives": len(self.heads),
                        "total_skew_ns": sum(self.heads[j]["skew_ns"] for j in js),
                        "wait_caused_ns": sum(self.total_wait[j] for j in js),
                        "max_skew_ns": max((self.heads[j]["skew_ns"] for j in js), default=0)})
        return sorted(out, key=lambda d: (-d["wait_caused_ns"], d["rank"]))


class _Chunks(Sequence):
    """The msgpack chunks of Matched.rows, `per` collectives each, encoded when read (the last
    one kept)."""

    def __init__(self, m: Matched, names: dict[int, str], per: int):
        self._m, self._names, self._per = m, names, per
        self._last: tuple[int, bytes] | None = None

    def __len__(self) -> int:
        return -(-len(self._m.heads) // self._per)

    def __getitem__(self, c):
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(len(self)))]
        c = chunk_index(c, len(self))
        if self._last is not None and self._last[0] == c:
            return self._last[1]
        lo, hi = c * self._per, min(len(self._m.heads), (c + 1) * self._per)
        chunk = _encode([self._m.row(j, self._names) for j in range(lo, hi)])
        self._last = (c, chunk)
        return chunk


class _Ids(Mapping):
    """A Mapping over sorted activity ids (`ids`), its values looked up through a dict of the ids
    built on first use."""

    ids: array

    def _cut(self, lo: int, hi: int | None) -> tuple[int, int]:
        return bisect_left(self.ids, lo), len(self.ids) if hi is None else bisect_left(self.ids, hi)

    def _pos(self) -> dict:
        pos = self.__dict__.get("_at")
        if pos is None:
            pos = self.__dict__["_at"] = dict(zip(self.ids, range(len(self.ids)), strict=True))
        return pos

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, i) -> bool:
        # (Mapping's would build the value and catch a KeyError: a stall group asks it of each
        # of its activities)
        return i in self._pos()

    def get(self, i, default=None):
        return self[i] if i in self._pos() else default

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_at"}


class WaitUntil(_Ids):
    """activity id -> the latest arrival of its collective on the id's rank clock."""

    def __init__(self, ids: array, until: array | list):
        self.ids, self.until = ids, until

    def __getitem__(self, i: int) -> int:
        return self.until[self._pos()[i]]

    def range(self, lo: int, hi: int | None) -> WaitUntil:
        """The ids in [lo, hi) (hi None: no upper bound)."""
        a, b = self._cut(lo, hi)
        return WaitUntil(self.ids[a:b], self.until[a:b])


class ById(_Ids):
    """activity id -> its collective: the head (kind, group, index, straggler, skew_ns, imbalance,
    ...) and `wait_ns` of the id's own rank."""

    def __init__(self, heads: list[dict], ids: array, coll: array | list, rank: array | list, wait: array | list):
        self.heads, self.ids, self.coll, self.rank, self.wait = heads, ids, coll, rank, wait

    def __getitem__(self, i: int) -> dict:
        p = self._pos()[i]
        return {**self.heads[self.coll[p]], "wait_ns": {str(self.rank[p]): self.wait[p]}}

    def head_wait(self, i: int, rank: int) -> tuple[dict, int | None] | None:
        """(the head of id i's collective, the wait_ns of `rank` there: self[i]["wait_ns"].get(str(rank))),
        or None where i has none, without building self[i] (a stall's evidence asks it of each
        collective it names)."""
        p = self._pos().get(i)
        if p is None:
            return None
        return self.heads[self.coll[p]], (self.wait[p] if self.rank[p] == rank else None)

    def collective(self, i: int) -> int:
        """The index of id i's collective in the document's `collectives`."""
        return self.coll[self._pos()[i]]

    def range(self, lo: int, hi: int | None) -> ById:
        a, b = self._cut(lo, hi)
        return ById(self.heads, self.ids[a:b], self.coll[a:b], self.rank[a:b], self.wait[a:b])

