"""Typed msgspec structs for Kineto Chrome-trace JSON: only the fields traceview reads.

The events are decoded a batch at a time (`kineto_stream`) straight into `TypedEvent`, their
`args` into `Args` (every field any group of events reads; non-object args kept as they are and
read as absent), in the same single pass that the benchmarks' floor makes (`TypedTrace`). A
batch's events become Arrow columns before the next batch is decoded, so the decoded Python objects
of only one batch are alive at a time. A file the stream cannot split is decoded whole into
`Trace` (each event a raw slice of the file), then a chunk of those slices at a time.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import msgspec

_RawOpt = msgspec.Raw
_EMPTY = msgspec.Raw(b"")


def _f(name: str, default=None):
    return msgspec.field(default=default, name=name)


class Args(msgspec.Struct, gc=False):
    """Every `args` field any group of events reads."""
    # collective metadata (PyTorch >= 2.1 writes it on NCCL kernels and record_param_comms)
    coll_name: Any = _f("Collective name")
    in_nelems: Any = _f("In msg nelems")
    out_nelems: Any = _f("Out msg nelems")
    group_size: Any = _f("Group size")
    dtype: Any = None
    in_split: _RawOpt = _f("In split size", _EMPTY)
    out_split: _RawOpt = _f("Out split size", _EMPTY)
    pg_name: Any = _f("Process Group Name")
    # links
    correlation: Any = None
    external_id: Any = _f("External id")
    external_id_old: Any = _f("external id")
    # CPU ranges
    seq: Any = _f("Sequence number")
    input_dims: _RawOpt = _f("Input Dims", _EMPTY)
    input_types: _RawOpt = _f("Input type", _EMPTY)
    concrete: _RawOpt = _f("Concrete Inputs", _EMPTY)
    # GPU activities
    device: Any = None
    stream: Any = None
    bytes: Any = None
    grid: _RawOpt = _EMPTY
    block: _RawOpt = _EMPTY
    # sync records
    sync_kind: Any = _f("cuda_sync_kind")
    wait_on_stream: Any = None
    wait_event: Any = _f("wait_on_cuda_event_id")


class Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: _RawOpt = _EMPTY


class TypedEvent(Event, gc=False):
    args: Union[Args, None, list, str, int, float, bool] = None  # type: ignore[assignment]  # narrows Event.args: msgspec decodes what Event keeps raw


class DeviceProps(msgspec.Struct):
    id: Any = None
    name: Any = None
    numSms: Any = None


class Trace(msgspec.Struct):
    """The top level; each event stays a raw slice of the file until its chunk is decoded."""
    traceEvents: Optional[list[msgspec.Raw]] = None
    schemaVersion: Any = None
    deviceProperties: Optional[list[DeviceProps]] = None
    distributedInfo: Optional[dict[str, Any]] = None
    baseTimeNanoseconds: Any = None


class TypedTrace(Trace):
    """Every event and its args decoded at once (the floor the benchmarks compare with)."""
    traceEvents: Optional[list[TypedEvent]] = None  # type: ignore[assignment]  # the decoded form of Trace.traceEvents
