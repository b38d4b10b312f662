"""`PackedRows`: a long list of row dicts of a document held as msgpack chunks (a few tens of bytes
a row instead of a dict and its values, several hundred); each row is decoded when it is read.

It is a read-only Sequence (len, iteration, indexing, slices give lists, equality with a list), so
renderers and checks that read rows see the same dicts. Rows are packed only when msgpack gives
them back exactly (plain data of exactly dict/list/str/int/float/bool/None, no tuple): `pack`
returns the list unchanged otherwise. The JSON writer and the store write a packed list chunk by
chunk (`chunks`, `raw_chunks`), never as one whole list.
"""
from __future__ import annotations

import heapq
import mmap
import os
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any

import msgspec

from ..plain_data import Shape, register_packed, scan

RELEASE_EVERY = 16      # chunks read between two releases of mapped parts' pages
CHUNK = 1024            # rows a chunk: one chunk's dicts at a time in memory when it is read
MIN_ROWS = 4096         # shorter lists stay lists (nothing to gain)

_decode = msgspec.msgpack.Decoder().decode
_encode = msgspec.msgpack.Encoder().encode


def _array_header_size(n: int) -> int:
    return 1 if n < 16 else 3 if n < 2**16 else 5



def chunk_index(c: int, n: int) -> int:
    """A chunk index of a sequence of n chunks, negative ones counted from the end (IndexError past it)."""
    if c < 0:
        c += n
    if not 0 <= c < n:
        raise IndexError("chunk index out of range")
    return c

class PackedRows(Sequence):
    """Rows as msgpack chunks of `per` rows, CHUNK unless given (each chunk the msgpack of a list
    of rows; the last may hold fewer)."""

    __slots__ = ("_chunks", "_len", "shape", "_per")

    def __init__(self, chunks: Sequence[bytes], length: int, shape: Shape, per: int = CHUNK):
        self._chunks = chunks
        self._len = length
        self.shape = shape          # plain_data.scan of the rows
        self._per = per

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Any]:
        for c in self._chunks:
            yield from _decode(c)

    def __getitem__(self, i):
        if isinstance(i, slice):
            idx = range(*i.indices(self._len))
            if idx.step == 1:
                return self._range(idx.start, idx.stop)
            return [self[j] for j in idx]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("PackedRows index out of range")
        return _decode(self._chunks[i // self._per])[i % self._per]

    def _range(self, start: int, stop: int) -> list:
        out: list = []
        if start >= stop:
            return out
        per = self._per
        for c in range(start // per, (stop - 1) // per + 1):
            rows = _decode(self._chunks[c])
            lo, hi = c * per, c * per + len(rows)
            out.extend(rows[max(start, lo) - lo:min(stop, hi) - lo])
        return out

    def __eq__(self, other) -> bool:
        if isinstance(other, PackedRows):
            if self._per == other._per:
                return self._len == other._len and len(self._chunks) == len(other._chunks) and \
                    all(a == b for a, b in zip(self._chunks, other._chunks, strict=True))
            return self._len == other._len and all(a == b for a, b in zip(self, other, strict=True))
        if isinstance(other, (list, tuple)):
            return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedRows({self._len} rows, {sum(map(len, self._chunks))} bytes)"

    def __reduce__(self):
        chunks = self._chunks
        return PackedRows, (chunks if type(chunks) is list else list(chunks), self._len, self.shape, self._per)

    def chunks(self, lo: int = 0, hi: int | None = None) -> Iterator[list]:
        """The rows, a chunk's list at a time (chunks lo to hi, all of them by default)."""
        for i in range(lo, len(self._chunks) if hi is None else hi):
            yield _decode(self._chunks[i])

    def raw_chunks(self) -> Iterator[memoryview]:
        """Each chunk's msgpack of its rows without the array header: joined after the header of
        a list of len(self) they are the msgpack of the whole list."""
        last = len(self._chunks) - 1
        for i, c in enumerate(self._chunks):
            n = self._per if i < last else self._len - self._per * last
            yield memoryview(c)[_array_header_size(n):]

    def map(self, fn) -> PackedRows:
        """fn applied to every row, packed again."""
        return pack_iter((fn(r) for r in self), self.shape)

    def source(self):
        """Where another process of this machine (a mapped job's worker) finds these rows: a small
        picklable description that `from_source` makes into the same PackedRows there, or None
        (rows held in this process's memory). Rows in files: a chunk file (pack_reader) or the
        spilled parts of a merge (sort_rows)."""
        c = self._chunks
        if type(c) is _FileChunks and c.path is not None:
            return ("file", c.path, c._ends, self._len, self.shape, self._per)
        if type(c) is _MergedChunks and all(p.path is not None or not len(p) for p in c._parts):
            return ("merged", [(p.path, p.ends_source(), p.shape) for p in c._parts], _as_array(c._part, "I"),
                    _as_array(c._index, "q"), c._ordered, self._len, self.shape)
        return None


register_packed(PackedRows)


def source_chunks(src) -> int:
    """The chunks of the PackedRows that PackedRows.source described (list_body writes them)."""
    return len(src[2]) if src[0] == "file" else -(-src[5] // CHUNK)


def source_range(src, lo: int, hi: int) -> tuple:
    """(source, lo, hi) for chunks lo to hi of `src`, as list_body_file takes them: a chunk file is
    read in that range; a merge is cut to that range's rows (its order arrays, 12 bytes a row, not
    sent whole to every task), all of which are then written."""
    if src[0] == "file":
        return src, lo, hi
    kind, parts, part_of, index_of, ordered, n, shape = src
    a, b = lo * CHUNK, min(n, hi * CHUNK)
    return (kind, parts, part_of[a:b], index_of[a:b], ordered, b - a, shape), 0, None


def from_source(src) -> PackedRows:
    """The PackedRows that PackedRows.source described (in another process: its files mapped)."""
    if src[0] == "file":
        _, path, ends, n, shape, per = src
        return PackedRows(_FileChunks(_mapped(path, None), ends, path), n, shape, per)
    _, parts, part_of, index_of, ordered, n, shape = src
    rows = []
    for path, ends, pshape in parts:
        if type(ends) is str:           # a spilled part (RowBytes.ends_source: their file)
            rows.append(RowBytes.from_spill(path, pshape, keys=False))
            continue
        rb = RowBytes(b"", ends, pshape, path)
        if path is not None and len(ends) and ends[-1]:
            rb.data = _mapped(path, None)
        rows.append(rb)
    return PackedRows(_MergedChunks(rows, part_of, index_of, ordered), n, shape)


def packable(rows: list, shape: Shape | None = None) -> bool:
    shape = scan(rows) if shape is None else shape
    return shape.plain and not shape.tuples and all(type(r) is dict for r in rows)


def _packing_shape(rows: list) -> Shape | None:
    """The shape of row dicts about to be encoded with msgspec, or None where msgpack would not give
    them back exactly (packable). Their ints are not looked at (scan(ints=False)): msgspec raises
    for an int it cannot write, as it did after a full scan (packable never looked at them)."""
    shape = scan(rows, ints=False)
    return shape if packable(rows, shape) else None


def pack(rows):
    """`rows` as PackedRows when it is a long list of row dicts msgpack gives back exactly, else
    `rows` itself."""
    if type(rows) is not list or len(rows) < MIN_ROWS:
        return rows
    shape = _packing_shape(rows)
    if shape is None:
        return rows
    chunks = [_encode(rows[i:i + CHUNK]) for i in range(0, len(rows), CHUNK)]
    return PackedRows(chunks, len(rows), shape)


def pack_iter(rows, shape: Shape) -> PackedRows:
    """Rows from an iterator packed as they come (`shape`: what scan says of all of them)."""
    chunks, batch, n = [], [], 0
    for r in rows:
        batch.append(r)
        if len(batch) == CHUNK:
            chunks.append(_encode(batch))
            n += len(batch)
            batch = []
    if batch:
        chunks.append(_encode(batch))
        n += len(batch)
    return PackedRows(chunks, n, shape)


def pack_lists(doc: dict, keys) -> dict:
    """The document with its row lists under `keys` packed (in place; the lists are let go)."""
    for k in keys:
        if k in doc:
            doc[k] = pack(doc[k])
    return doc


def _header(n: int, small: int, tag16: int) -> bytes:
    if n < 16:
        return bytes([small | n])
    return bytes([tag16]) + n.to_bytes(2, "big") if n < 2**16 else bytes([tag16 + 1]) + n.to_bytes(4, "big")


def msgpack_pieces(doc: dict) -> Iterator[bytes | memoryview]:
    """The msgpack of `doc` (as msgspec writes it, its PackedRows as the lists they hold) in
    pieces: the map header, then each key and value, a PackedRows as its array header and its
    chunks as they are held."""
    yield _header(len(doc), 0x80, 0xde)
    for k, v in doc.items():
        yield _encode(k)
        if type(v) is PackedRows:
            yield _header(len(v), 0x90, 0xdc)
            yield from v.raw_chunks()
        else:
            yield _encode(v)


def plain(obj):
    """`obj` with every PackedRows made a list (containers above them copied): for a caller that
    needs exactly plain data (json.dumps, a user of the API)."""
    t = type(obj)
    if t is PackedRows:
        return list(obj)
    if t is dict:
        if not any(type(v) is PackedRows for v in obj.values()):
            return obj
        return {k: plain(v) for k, v in obj.items()}
    return obj


def combine(shapes) -> Shape:
    """The Shape of rows made of parts of these shapes."""
    shapes = list(shapes)
    return Shape(plain=all(s.plain for s in shapes), tuples=any(s.tuples for s in shapes),
                 finite=all(s.finite for s in shapes), exponent_floats=any(s.exponent_floats for s in shapes),
                 wide_ints=any(s.wide_ints for s in shapes), str_keys=all(s.str_keys for s in shapes))


class RowBytes:
    """Rows each as its own msgpack, all in one bytes object (`ends`: where each row ends): what a
    worker sends back instead of the dicts, a fraction of their size and one allocation in this
    process, not an object per row; `sort_rows` orders them."""

    __slots__ = ("data", "ends", "shape", "path", "keys", "maps")

    def __init__(self, data: bytes | mmap.mmap, ends: array, shape: Shape, path: str | None = None,
                 keys=None):
        self.data, self.ends, self.shape, self.path = data, ends, shape, path
        self.keys = keys        # presorted: the rows are in the order of these sort keys (a table)
        self.maps: list[mmap.mmap] = []      # the files of ends and keys, mapped (unpickled from a spill)

    def spill(self, path: str) -> None:
        """Write the rows to the file `path`, and their ends and sort keys beside it (path.ends,
        path.keys: an Arrow IPC file): from now on this pickles as those paths, and a process that
        unpickles it maps the files (its rows, ends and keys are then file pages, which `release`
        lets go, not memory of its own: a 1,024-rank job's stall parts are some 40 MB of keys and
        ends)."""
        _write_file(path, self.data)
        _write_file(f"{path}.ends", memoryview(self.ends).cast("B"))
        if self.keys is not None:
            import pyarrow as pa
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, self.keys.schema) as w:
                w.write_table(self.keys)
            _write_file(f"{path}.keys", memoryview(sink.getvalue()))
        self.path = path

    def spilled(self) -> RowBytes:
        """These rows as a process that unpickles them after `spill` has them: their files mapped,
        nothing of this object's memory held (a job mapped in its own process, --jobs 1: its
        batches' stall parts would otherwise all stay in memory, 540 MB at 1,024 ranks)."""
        assert self.path is not None, "spill first"
        rb = RowBytes.__new__(RowBytes)
        rb.__setstate__(self.__getstate__())
        return rb

    def release(self) -> None:
        """Mapped rows: let go of the pages read so far (they are read again when needed)."""
        if type(self.data) is mmap.mmap:
            self.data.madvise(mmap.MADV_DONTNEED)
        for mm in self.maps:
            mm.madvise(mmap.MADV_DONTNEED)

    def mapped(self) -> list[mmap.mmap]:
        """Every file of this part that this process maps."""
        return ([self.data] if type(self.data) is mmap.mmap else []) + self.maps

    def ends_source(self):
        """The ends as another process finds them: the path of their file where they lie in one."""
        return f"{self.path}.ends" if self.maps else self.ends

    def __len__(self) -> int:
        return len(self.ends)

    def row(self, i: int) -> memoryview:
        """Row i's msgpack."""
        return memoryview(self.data)[self.ends[i - 1] if i else 0:self.ends[i]]

    def __iter__(self):
        view, a = memoryview(self.data), 0
        for b in self.ends:
            yield _decode(view[a:b])
            a = b

    def __getstate__(self):
        if self.path is not None:
            return None, None, self.shape, self.path, self.keys is not None
        return self.data, self.ends, self.shape, self.path, self.keys

    def __setstate__(self, state):
        data, self.ends, self.shape, self.path, self.keys = state
        self.maps = []
        if data is None:
            assert self.path is not None
            self._map_spill(self.keys)
        else:
            self.data = data

    @classmethod
    def from_spill(cls, path: str, shape: Shape | None = None, keys: bool = True) -> RowBytes:
        """The rows `spill` wrote to `path` (with their keys where `keys`), memory-mapped."""
        rb = cls.__new__(cls)
        rb.shape, rb.path, rb.maps = shape, path, []    # type: ignore[assignment]  # None: only the order is read
        rb._map_spill(keys)
        return rb

    def _map_spill(self, keys: bool) -> None:
        """Map the files of this part's spill: its rows, ends and (where `keys`) sort keys."""
        assert self.path is not None
        self.ends = _ends_at(f"{self.path}.ends", self.maps)
        self.keys = None
        if keys:
            import pyarrow as pa
            self.keys = pa.ipc.open_file(pa.py_buffer(_mapped(f"{self.path}.keys", self.maps))).read_all()
        self.data = b"" if len(self.ends) == 0 or self.ends[-1] == 0 else _mapped(self.path, None)


def _write_file(path: str, data) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _ends_at(path: str, maps: list):
    """The int64 ends in the file `path`, memory-mapped (added to `maps`): an empty array for none."""
    if os.path.getsize(path) == 0:
        return array("q")
    return memoryview(_mapped(path, maps)).cast("q")


def row_bytes(rows: list):
    """`rows` (a list of row dicts) as RowBytes, or the list itself when msgpack would not give it
    back exactly."""
    shape = _packing_shape(rows)
    if shape is None:
        return rows
    return _joined_blobs(list(map(_encode, rows)), shape)


def presorted_row_bytes(rows: list, key) -> tuple:
    """presort(row_bytes(rows), key), without decoding the rows it has just packed: the rows are
    put in the stable order of `key` before they are packed (a mapped job's worker: its part of
    the stalls, sorted for the parent's merge). Returns (the part, its rows in that order); the
    part is `rows` itself where row_bytes would give the list back (msgpack would not give it
    back exactly), left in its order, as presort leaves a list."""
    shape = _packing_shape(rows)
    if shape is None:
        return rows, rows
    cols, order = _key_order(rows, key)   # (the rows' own values: msgpack gives these back exactly)
    if order is not None:
        rows = [rows[i] for i in order]
    part = _joined_blobs(list(map(_encode, rows)), shape)
    part.keys = cols
    return part, rows


def _joined_blobs(blobs: list[bytes], shape: Shape) -> RowBytes:
    """Rows' msgpack blobs, in order, as RowBytes (their bytes joined, each row's end beside)."""
    return RowBytes(b"".join(blobs), array("q", accumulate(map(len, blobs))), shape)


def reader_row_bytes(batches) -> RowBytes | None:
    """The rows of Arrow record batches (a query's result read a batch at a time) as RowBytes, each
    row its own msgpack: the rows pack_reader would pack, for a process that sends them on (a
    mapped job's worker: its batch's layer rows, which the parent then reads without packing them
    itself). None when some rows cannot be packed."""
    blobs: list[bytes] = []
    shapes = []
    for batch in batches:
        rows = batch.to_pylist()
        shape = _packing_shape(rows)
        if shape is None:
            return None
        shapes.append(shape)
        blobs.extend(map(_encode, rows))
        del rows
    return _joined_blobs(blobs, combine(shapes) if shapes else scan([]))


def concatenated(parts: list[RowBytes]) -> PackedRows:
    """The rows of `parts`, one part after the other, as PackedRows read from the parts (a chunk
    within one part is a slice of its bytes): the rows of a list whose parts were made in its order
    (a mapped job's batches), held once, in their parts."""
    part_of, index_of = array("I"), array("q")
    for pi, p in enumerate(parts):
        part_of.extend(array("I", [pi]) * len(p))
        index_of.extend(range(len(p)))
    return PackedRows(_MergedChunks(list(parts), part_of, index_of, ordered=True), len(index_of),
                      combine(p.shape for p in parts))


class _MergedChunks(Sequence):
    """The chunks of PackedRows whose rows lie in RowBytes parts, in the order given by (part,
    row) arrays: each chunk is joined when it is read (the last one kept), so that the rows are
    held once, in their parts, and not a second time as chunks."""

    def __init__(self, parts: list[RowBytes], part: array, index: array, ordered: bool = False):
        self._parts, self._part, self._index = parts, part, index
        self._last: tuple[int, bytes] | None = None
        self._ordered = ordered     # each part's rows come in their order (presorted parts merged)

    def __len__(self) -> int:
        return -(-len(self._index) // CHUNK)

    def __getitem__(self, c):
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(len(self)))]
        c = chunk_index(c, len(self))
        if self._last is not None and self._last[0] == c:
            return self._last[1]
        lo, hi = c * CHUNK, min(len(self._index), (c + 1) * CHUNK)
        parts = self._parts
        pa_, pb, ia, ib = self._part[lo], self._part[hi - 1], self._index[lo], self._index[hi - 1]
        if self._ordered and pa_ == pb and ib - ia == hi - 1 - lo:
            # rows ia..ib of one part, one after the other there (its rows come in their order)
            ends = parts[pa_].ends
            body = bytes(memoryview(parts[pa_].data)[ends[ia - 1] if ia else 0:ends[ib]])
        else:
            body = b"".join([parts[p].row(i) for p, i in zip(self._part[lo:hi], self._index[lo:hi], strict=True)])
        chunk = _header(hi - lo, 0x90, 0xdc) + body
        self._last = (c, chunk)
        if c % RELEASE_EVERY == RELEASE_EVERY - 1:      # mapped parts: the pages read for the last chunks
            for p in parts:
                p.release()
        return chunk


_INT64 = (-(2**63), 2**63 - 1)


def _key_columns(ks: list[tuple]):
    """The sort keys `ks` (tuples of one length) as an Arrow table of one column per element, int64
    or string, whose ascending sort is the order of the tuples; None where some element is of
    another type (a bool, a float, None, an int past int64, a string that is not UTF-8)."""
    import pyarrow as pa
    if not ks or type(ks[0]) is not tuple:
        return None
    width = len(ks[0])
    cols = []
    for j in range(width):
        col = [k[j] for k in ks]
        t = type(col[0])
        if t is int:
            lo, hi = _INT64
            if not all(type(x) is int for x in col) or min(col) < lo or max(col) > hi:
                return None
            cols.append(pa.array(col, pa.int64()))
        elif t is str:
            if not all(type(x) is str for x in col):
                return None
            try:
                cols.append(pa.array(col, pa.string()))
            except (pa.ArrowException, UnicodeError):
                return None
        else:
            return None
    if any(len(k) != width for k in ks):
        return None
    return pa.table(cols, names=[f"k{j}" for j in range(width)])


def _key_order(rows: list, key) -> tuple:
    """(the sort keys of `rows` as columns (_key_columns) in their stable order, that order) where
    it is not the rows' own; (columns, None) where it is; (None, None) where the keys are not such
    columns (the rows are then left in their order)."""
    ks = [key(r) for r in rows]
    cols = _key_columns(ks)
    if cols is None:
        return None, None
    order = sorted(range(len(ks)), key=ks.__getitem__)
    if all(order[i] == i for i in range(len(order))):
        return cols, None
    return cols.take(order), order


def presort(part: RowBytes, key) -> tuple[RowBytes, list]:
    """`part` with its rows in the stable order of `key`, and those keys kept beside them (`keys`),
    so that `sort_rows` merges such parts without decoding a row (a part packed already: a mapped
    job's worker packs its rows in that order to begin with, presorted_row_bytes); and the rows
    decoded, in that order. A part whose keys are not columns of
    int64 or text (or an empty one) comes back in its order, without keys: sorted as before."""
    rows = list(part)
    cols, order = _key_order(rows, key)
    if cols is None:
        return part, rows
    if order is not None:
        rows = [rows[i] for i in order]
        body = b"".join([part.row(i) for i in order])
        ends = array("q", accumulate(part.ends[i] - (part.ends[i - 1] if i else 0) for i in order))
        part = RowBytes(body, ends, part.shape)
    part.keys = cols
    return part, rows


def _presorted_order(parts: list[RowBytes]) -> tuple[array, array] | None:
    """The (part, row) order of the stable sort of the presorted `parts`' rows (each part's keys
    ascending): the parts one after the other where each ends at or before the next begins, else
    the keys' stable sort (Arrow's sort_indices is stable). None when the parts' keys do not
    line up (another width or type)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    nums = [pi for pi, p in enumerate(parts) if len(p)]
    tables = [parts[pi].keys for pi in nums]
    if any(not t.schema.equals(tables[0].schema) for t in tables[1:]):
        return None
    part_of, index_of = array("I"), array("q")
    for pi in nums:
        part_of.extend(array("I", [pi]) * len(parts[pi]))
        index_of.extend(range(len(parts[pi])))
    if all(_row_key(tables[i], -1) <= _row_key(tables[i + 1], 0) for i in range(len(tables) - 1)):
        return part_of, index_of                  # one after the other
    order = pc.sort_indices(pa.concat_tables(tables), sort_keys=[(c, "ascending") for c in tables[0].column_names])
    n = len(part_of)
    p_col = pa.Array.from_buffers(pa.uint32(), n, [None, pa.py_buffer(part_of)])
    i_col = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(index_of)])
    return array("I", _values(p_col.take(order), 4)), array("q", _values(i_col.take(order), 8))


def presorted_order_files(parts: list[tuple[str | None, int]], out: str) -> int | None:
    """_presorted_order of spilled presorted parts, given as (path, rows) (RowBytes.spill; an
    empty part: (None, 0)), run where it is called (a mapped job's worker: the parent then holds
    neither the parts' keys nor the sort's memory, some 60 MiB for the stall rows of a 1,024-rank
    job); the order written to the files out.part (uint32) and out.index (int64). Returns the
    number of rows, or None where the keys do not line up (the caller sorts as before)."""
    rows = []
    for path, n in parts:
        if path is None or not n:
            rows.append(RowBytes(b"", array("q"), None))   # type: ignore[arg-type]
            continue
        rows.append(RowBytes.from_spill(path))
    got = _presorted_order(rows)
    if got is None:
        return None
    part_of, index_of = got
    _write_file(f"{out}.part", memoryview(part_of).cast("B"))
    _write_file(f"{out}.index", memoryview(index_of).cast("B"))
    return len(index_of)


def mapped_order(out: str, n: int, maps: list) -> tuple:
    """The (part, row) order presorted_order_files wrote, memory-mapped (the mappings added to `maps`)."""
    if n == 0:
        return array("I"), array("q")
    return memoryview(_mapped(f"{out}.part", maps)).cast("I"), memoryview(_mapped(f"{out}.index", maps)).cast("q")


def _as_array(a, typecode: str):
    """An order array as it pickles (a mapped one is copied into an array)."""
    return a if type(a) is array else array(typecode, a)


def _row_key(table, i: int) -> tuple:
    return tuple(c[i].as_py() for c in table.columns)


def _values(arr, width: int) -> bytes:
    """The values of a fixed-width Arrow array without nulls, as bytes."""
    return bytes(memoryview(arr.buffers()[1])[arr.offset * width:(arr.offset + len(arr)) * width])


def sort_rows(parts: list, key, keys: bool = True, order=None) -> tuple[Any, list | None]:
    """The rows of `parts` (each a list of row dicts or RowBytes) in one list sorted by `key` (a
    stable sort of their concatenation), and the keys in that order (None when not `keys`):
    PackedRows when they are MIN_ROWS or more and all could be packed, else a list of the row dicts.

    RowBytes parts are sorted one at a time (a part already in order is not sorted) and then
    merged (heapq.merge prefers the earlier part among equal keys: the order of the stable sort);
    the PackedRows returned reads its rows from the parts (_MergedChunks): what is held besides
    the parts is two arrays of the order and one part's keys at a time, not a key per row.
    `order`: a function that finds the order of presorted spilled parts elsewhere (a mapped job's
    worker, mapped.Remote.presorted_order: the parts' keys are files) and gives (part, row)
    arrays, or None to find it here."""
    if not all(type(p) is RowBytes for p in parts):
        rows = sorted((r for p in parts for r in p), key=key)
        return rows, [key(r) for r in rows] if keys else None
    n = sum(len(p) for p in parts)
    # parts a worker sorted (presort, with the same key): merged from their keys, no row decoded
    got = None
    if not keys and n and all(p.keys is not None or not len(p) for p in parts):
        got = order(parts) if order is not None and all(p.path is not None or not len(p) for p in parts) else None
        got = got if got is not None else _presorted_order(parts)
    if got is not None:
        part_of, index_of = got
        if n < MIN_ROWS:
            return [_decode(parts[pi].row(i)) for pi, i in zip(part_of, index_of, strict=True)], None
        for p in parts:
            p.keys = None
        return PackedRows(_MergedChunks(list(parts), part_of, index_of, ordered=True), n,
                          combine(p.shape for p in parts)), None
    if n < MIN_ROWS:
        items = sorted(((key(_decode(p.row(i))), p.row(i)) for p in parts for i in range(len(p))),
                       key=lambda kb: kb[0])
        return [_decode(b) for _, b in items], [k for k, _ in items] if keys else None
    orders = [_order(p, key) for p in parts]
    part_of, index_of = array("I"), array("q")
    out_keys: list | None = [] if keys else None
    if len(parts) == 1:
        index_of = orders[0]
        part_of = array("I", bytes(4 * n))
        if out_keys is not None:
            out_keys.extend(key(_decode(parts[0].row(i))) for i in index_of)
    else:
        streams = [_tagged(pi, o) for pi, o in enumerate(orders)]
        for pi, i in heapq.merge(*streams, key=lambda t: key(_decode(parts[t[0]].row(t[1])))):
            part_of.append(pi)
            index_of.append(i)
            if len(index_of) % (RELEASE_EVERY * CHUNK) == 0:
                for p in parts:
                    p.release()
        if out_keys is not None:
            out_keys.extend(key(_decode(parts[pi].row(i))) for pi, i in zip(part_of, index_of, strict=True))
    del orders
    return PackedRows(_MergedChunks(list(parts), part_of, index_of), n, combine(p.shape for p in parts)), out_keys


def _tagged(pi: int, order: array):
    for i in order:
        yield pi, i


def _order(part: RowBytes, key) -> array:
    """The row indices of `part` in the stable order of `key` of the decoded rows."""
    ks = [key(_decode(part.row(i))) for i in range(len(part))]
    part.release()
    if all(ks[i] <= ks[i + 1] for i in range(len(ks) - 1)):
        return array("q", range(len(ks)))
    return array("q", sorted(range(len(ks)), key=ks.__getitem__))


class _FileChunks(Sequence):
    """The chunks of PackedRows one after the other in a file, memory-mapped: they are file pages
    (those read are let go every RELEASE_EVERY chunks, and by Remote.release_pages), not memory of
    this process."""

    def __init__(self, mm: mmap.mmap, ends: array, path: str | None = None):
        self.map, self._ends, self.path = mm, ends, path

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, c):
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(len(self)))]
        c = chunk_index(c, len(self))
        chunk = self.map[self._ends[c - 1] if c else 0:self._ends[c]]
        if c % RELEASE_EVERY == RELEASE_EVERY - 1:
            self.map.madvise(mmap.MADV_DONTNEED)
        return chunk


def _mapped(path: str, maps: list | None) -> mmap.mmap:
    fd = os.open(path, os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    mm.madvise(mmap.MADV_DONTNEED)
    if maps is not None:
        maps.append(mm)
    return mm


RELEASE_ROWS = 1 << 16   # pack_reader's `release` is called after each this many rows


def pack_reader(batches, path: str | None = None, maps: list | None = None, release=None):
    """The rows of Arrow record batches (a query's result read a batch at a time) as PackedRows of
    CHUNK rows a chunk, as pack_table makes them; the chunks written to the file `path` as they
    are made where given, and read from there memory-mapped (file pages, not memory of this
    process; the mapping added to `maps`). None when some rows cannot be packed. `release`: called
    after every RELEASE_ROWS rows read (a mapped job lets go of the pages of its memory-mapped
    tables the scan has passed: else a scan of all of a table counts all of it in this process's
    peak)."""
    chunks: list[bytes] = []
    ends, shapes, pending = array("q"), [], []
    tmp = f"{path}.{os.getpid()}.tmp" if path is not None else None
    fh = open(tmp, "wb") if tmp is not None else None

    def emit(rows: list) -> bool:
        shape = _packing_shape(rows)
        if shape is None:
            return False
        shapes.append(shape)
        blob = _encode(rows)
        if fh is None:
            chunks.append(blob)
        else:
            fh.write(blob)
            ends.append(fh.tell())
        return True

    n, ok, read = 0, True, 0
    try:
        for batch in batches:
            pending.extend(batch.to_pylist())
            read += batch.num_rows
            if release is not None and read >= RELEASE_ROWS:
                release()
                read = 0
            while ok and len(pending) >= CHUNK:
                ok = emit(pending[:CHUNK])
                del pending[:CHUNK]
                n += CHUNK
            if not ok:
                break
        if ok and pending:
            ok = emit(pending)
            n += len(pending)
    finally:
        if fh is not None:
            fh.close()
    if not ok or tmp is None or path is None or n == 0:
        if tmp is not None:
            os.unlink(tmp)
        return None if not ok else PackedRows(chunks, n, combine(shapes))
    os.replace(tmp, path)
    return PackedRows(_FileChunks(_mapped(path, maps), ends, path), n, combine(shapes))


def pack_table(table):
    """An Arrow table's rows (to_pylist, as Session.rows gives them) as PackedRows, a chunk of rows
    at a time; a list of them when some chunk cannot be packed."""
    rows = pack_reader(table.to_batches(max_chunksize=CHUNK))
    return table.to_pylist() if rows is None else rows
