"""The nsys parser's absent columns (parsers/nsys.py `_conformed`): nulls over one shared zeroed
buffer, the same arrays, and the same Arrow IPC bytes, as pa.nulls and schema.conform give."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from traceview import schema
from traceview.parsers import nsys


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000])
@pytest.mark.parametrize("typ", [pa.int64(), pa.int32(), pa.int8(), pa.float64(), pa.string(), schema.CODED,
                                 pa.bool_(), pa.list_(pa.int64())])
def test_nulls_match_pa_nulls(n, typ):
    zeros = pa.py_buffer(bytes(8 * n + 8))
    got, want = nsys._nulls(typ, n, zeros), pa.nulls(n, typ)
    got.validate(full=True)
    assert got.type == typ and got.null_count == n and got.equals(want)
    assert _ipc(pa.table({"c": got})) == _ipc(pa.table({"c": want}))


def _values(typ: pa.DataType) -> pa.Array:
    if pa.types.is_integer(typ):
        return pa.array([1, 2], typ)
    return pa.array(["a", "b"]).cast(typ)   # string, or dictionary-coded string


@pytest.mark.parametrize("name", list(schema.TABLES))
def test_conformed_is_schema_conform(name):
    # two rows of the first half of the schema's columns (the second half come from _conformed)
    fields = list(schema.TABLES[name])[: len(schema.TABLES[name]) // 2]
    t = pa.table({f.name: _values(f.type) for f in fields})
    got, want = nsys._conformed(name, t), schema.conform(name, t)
    got.validate(full=True)
    assert got.schema == want.schema and got.equals(want)
    assert _ipc(got) == _ipc(want)
    if name == "cpu_ranges":   # the absent columns share one buffer
        addr = {got.column(f).chunk(0).buffers()[0].address for f in ("fwd_id", "coll_name", "input_types")}
        assert len(addr) == 1


@pytest.mark.parametrize("name", list(schema.TABLES))
def test_all_null_columns_read_are_shared_nulls(name):
    # every column read but null on every row: the same table, its columns over one buffer
    t = pa.table({f.name: pa.nulls(3, f.type) for f in schema.TABLES[name]})
    got = nsys._conformed(name, t)
    got.validate(full=True)
    assert got.schema == schema.TABLES[name] and got.equals(schema.conform(name, t))
    assert len({got.column(i).chunk(0).buffers()[0].address for i in range(got.num_columns)}) == 1
