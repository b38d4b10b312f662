"""The canonical trace tables: the one contract between parsers and everything after them.

Every parser (Kineto JSON, Nsight Systems SQLite) produces exactly these Arrow tables.
Nothing downstream of a parser may look at a format-specific field; if an analysis needs
a fact, it gets a canonical column here, documented field by field.

Conventions
- Times are integer nanoseconds on one clock per rank (`start_ns`, `end_ns`, end exclusive).
  `meta.clock_offset_ns` converts that clock to UNIX epoch nanoseconds where the format
  records it (Kineto `baseTimeNanoseconds`, nsys session start time), for aligning ranks.
- `id` columns are unique within their table for the whole loaded profile (all ranks).
  Cross-table links (`launch_id`, `op_id`, `parent_id`, `fwd_id`) hold those ids.
- `rank` is the rank in the job (0..world_size-1) assigned by the parser.
"""
from __future__ import annotations

import pyarrow as pa

# Strings that repeat on many rows (names, kinds, shapes): dictionary-encoded, each distinct value
# stored once (DuckDB reads them as VARCHAR; to_pylist() gives str).
CODED = pa.dictionary(pa.int32(), pa.string())


def _f(name: str, typ: pa.DataType, doc: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable, metadata={"doc": doc})


# Collective metadata, shared by GPU activities and CPU ranges (where the format records it).
_COLL = [
    _f("coll_name", pa.string(),
       "collective name from the trace's comm metadata (e.g. 'all_to_all', 'allreduce'); null if not recorded"),
    _f("coll_in_nelems", pa.int64(), "input message element count"),
    _f("coll_out_nelems", pa.int64(), "output message element count"),
    _f("coll_dtype", pa.string(), "element type of the collective"),
    _f("coll_group_size", pa.int32(), "number of ranks in the collective's group"),
    _f("coll_pg", pa.string(), "process group name (identifies the communicator)"),
    _f("coll_in_split", pa.string(), "JSON list of input split sizes (all-to-all-v), or null"),
    _f("coll_out_split", pa.string(), "JSON list of output split sizes, or null"),
]

GPU_ACTIVITIES = pa.schema([
    _f("id", pa.int64(), "unique id of the activity", False),
    _f("rank", pa.int32(), "rank of the process that launched it", False),
    _f("device", pa.int32(), "GPU index within its node"),
    _f("stream", pa.int64(), "CUDA/HIP stream id"),
    _f("start_ns", pa.int64(), "start on the GPU, ns", False),
    _f("end_ns", pa.int64(), "end on the GPU, ns (exclusive)", False),
    _f("kind", CODED, "'kernel', 'memcpy' or 'memset'", False),
    _f("name", CODED, "kernel name (demangled where available) or copy/set description", False),
    _f("correlation", pa.int64(), "correlation id shared with the launching API call"),
    _f("launch_id", pa.int64(), "launches.id of the API call that launched it"),
    _f("op_id", pa.int64(), "cpu_ranges.id of the innermost CPU range around the launch (the launching op)"),
    _f("bytes", pa.int64(), "bytes moved or set (memcpy/memset)"),
    _f("grid", pa.string(), "grid dimensions 'x,y,z' (kernels)"),
    _f("block", pa.string(), "block dimensions 'x,y,z' (kernels)"),
    *_COLL,
])

CPU_RANGES = pa.schema([
    _f("id", pa.int64(), "unique id of the range", False),
    _f("rank", pa.int32(), "rank of the process", False),
    _f("pid", pa.int64(), "OS process id"),
    _f("tid", pa.int64(), "OS thread id", False),
    _f("start_ns", pa.int64(), "start, ns", False),
    _f("end_ns", pa.int64(), "end, ns (exclusive)", False),
    _f("kind", CODED,
       "'op' (framework operator), 'annotation' (user range: record_function or NVTX), 'python' (Python function)",
       False),
    _f("name", CODED, "range name", False),
    _f("domain", pa.string(), "annotation domain (NVTX domain name, e.g. 'NCCL'); null for the default domain"),
    _f("depth", pa.int32(), "nesting depth on its thread (0 = outermost)"),
    _f("parent_id", pa.int64(), "id of the enclosing range on the same thread"),
    _f("seq", pa.int64(), "autograd sequence number (forward op and the backward op that differentiates it share it)"),
    _f("fwd_id", pa.int64(), "for a backward op: id of the forward op it differentiates, where the format links them"),
    _f("input_dims", CODED, "JSON list of input shapes, where recorded"),
    _f("input_types", CODED, "JSON list of input dtypes, where recorded"),
    _f("concrete_inputs", CODED, "JSON list of scalar inputs, where recorded"),
    *_COLL,
])

LAUNCHES = pa.schema([
    _f("id", pa.int64(), "unique id of the call", False),
    _f("rank", pa.int32(), "rank of the process", False),
    _f("pid", pa.int64(), "OS process id"),
    _f("tid", pa.int64(), "OS thread id", False),
    _f("start_ns", pa.int64(), "start of the API call on the CPU, ns", False),
    _f("end_ns", pa.int64(), "end of the API call, ns", False),
    _f("name", CODED, "API name, e.g. 'cudaLaunchKernel', 'cudaStreamSynchronize'", False),
    _f("api", CODED, "'runtime' or 'driver'"),
    _f("correlation", pa.int64(), "correlation id (links to gpu_activities.correlation)"),
    _f("op_id", pa.int64(), "cpu_ranges.id of the innermost CPU range around the call"),
])

SYNCS = pa.schema([
    _f("id", pa.int64(), "unique id", False),
    _f("rank", pa.int32(), "rank", False),
    _f("start_ns", pa.int64(), "start, ns", False),
    _f("end_ns", pa.int64(), "end, ns", False),
    _f("kind", CODED, "'stream_wait_event', 'event_sync', 'stream_sync', 'context_sync' or 'other'", False),
    _f("device", pa.int32(), "GPU index"),
    _f("stream", pa.int64(), "stream that waits (stream_wait_event) or is synchronized"),
    _f("event_id", pa.int64(), "CUDA event id waited on, where recorded"),
    _f("event_stream", pa.int64(), "stream on which the awaited event was recorded, where recorded"),
    _f("correlation", pa.int64(), "correlation id of the API call that caused it"),
])

META = pa.schema([
    _f("rank", pa.int32(), "rank", False),
    _f("world_size", pa.int32(), "ranks in the job (as recorded, else number of ranks loaded)"),
    _f("source_format", pa.string(), "'kineto' or 'nsys' (for provenance only: analyses must not branch on it)", False),
    _f("source_version", pa.string(), "format/schema version string"),
    _f("source_file", pa.string(), "path of the input file", False),
    _f("device", pa.int32(), "GPU index used by this rank"),
    _f("gpu_name", pa.string(), "GPU product name, where recorded"),
    _f("sm_count", pa.int32(), "number of SMs, where recorded"),
    _f("clock_offset_ns", pa.int64(), "add to *_ns to get UNIX epoch ns, where known"),
    _f("rank_source", pa.string(),
       "how the rank was determined (e.g. 'distributedInfo', 'file name', 'env RANK', 'order')"),
])

TABLES: dict[str, pa.Schema] = {
    "gpu_activities": GPU_ACTIVITIES,
    "cpu_ranges": CPU_RANGES,
    "launches": LAUNCHES,
    "syncs": SYNCS,
    "meta": META,
}


def empty(name: str) -> pa.Table:
    return TABLES[name].empty_table()


def conform(name: str, table: pa.Table) -> pa.Table:
    """Cast/complete a table to its canonical schema (missing columns become null)."""
    schema = TABLES[name]
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(cols, schema=schema)


def from_pydict(name: str, data: dict) -> pa.Table:
    schema = TABLES[name]
    n = len(next(iter(data.values()))) if data else 0
    arrays = []
    for field in schema:
        if field.name in data:
            v = data[field.name]
            if isinstance(v, (pa.Array, pa.ChunkedArray)):
                arrays.append(v.cast(field.type))
            else:
                arrays.append(pa.array(v, type=field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def markdown_doc() -> str:
    """The field-by-field documentation (docs/TABLES.md is generated from this)."""
    out = ["# Canonical tables", "", (__doc__ or "").strip(), ""]
    for tname, schema in TABLES.items():
        out += [f"## `{tname}`", "", "| column | type | meaning |", "|---|---|---|"]
        for f in schema:
            doc = (f.metadata or {}).get(b"doc", b"").decode()
            out.append(f"| `{f.name}` | {f.type}{'' if f.nullable else ', not null'} | {doc} |")
        out.append("")
    return "\n".join(out)
