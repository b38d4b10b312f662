"""Typed msgspec structs for Kineto Chrome-trace JSON: only the fields traceview reads.

Event `args` stay raw while the whole file is decoded and are decoded per event group
(GPU activities, launches, CPU ranges, syncs) with the small structs below, so that memory
holds few fields per event.
"""
from __future__ import annotations

from typing import Any, Optional

import msgspec

_RawOpt = msgspec.Raw
_EMPTY = msgspec.Raw(b"")


def _f(name: str, default=None):
    return msgspec.field(default=default, name=name)


class _CollArgs(msgspec.Struct, gc=False):
    """Collective metadata (PyTorch >= 2.1 writes it on NCCL kernels and record_param_comms)."""
    coll_name: Any = _f("Collective name")
    in_nelems: Any = _f("In msg nelems")
    out_nelems: Any = _f("Out msg nelems")
    group_size: Any = _f("Group size")
    dtype: Any = None
    in_split: _RawOpt = _f("In split size", _EMPTY)
    out_split: _RawOpt = _f("Out split size", _EMPTY)
    pg_name: Any = _f("Process Group Name")


class CpuArgs(_CollArgs, gc=False):
    external_id: Any = _f("External id")
    external_id_old: Any = _f("external id")
    seq: Any = _f("Sequence number")
    input_dims: _RawOpt = _f("Input Dims", _EMPTY)
    input_types: _RawOpt = _f("Input type", _EMPTY)
    concrete: _RawOpt = _f("Concrete Inputs", _EMPTY)


class LaunchArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = _f("External id")
    external_id_old: Any = _f("external id")


class GpuArgs(_CollArgs, gc=False):
    correlation: Any = None
    external_id: Any = _f("External id")
    external_id_old: Any = _f("external id")
    device: Any = None
    stream: Any = None
    bytes: Any = None
    grid: _RawOpt = _EMPTY
    block: _RawOpt = _EMPTY


class SyncArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    device: Any = None
    stream: Any = None
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


class DeviceProps(msgspec.Struct):
    id: Any = None
    name: Any = None
    numSms: Any = None


class Trace(msgspec.Struct):
    traceEvents: Optional[list[Event]] = None
    schemaVersion: Any = None
    deviceProperties: Optional[list[DeviceProps]] = None
    distributedInfo: Optional[dict[str, Any]] = None
    baseTimeNanoseconds: Any = None
