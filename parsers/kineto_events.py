"""Typed msgspec structs for Kineto Chrome-trace JSON: only the fields traceview reads.

The events are decoded a batch at a time (`kineto_stream`) into `STREAM_EVENTS`: a union tagged by
the event's phase `ph`, each phase decoded into only what the parser reads of it (a complete event
every field, its `args` into `Args`: every field any group of events reads, non-object args kept as
they are and read as absent; a flow its category, id, thread and time; any other phase nothing), in
the same single pass that the benchmarks' floor makes (`TypedTrace`). A batch's events become Arrow
columns before the next batch is decoded, so the decoded Python objects of only one batch are alive
at a time. A batch with an event the union does not decode (a phase that is not a string of the
Trace Event Format's) is decoded into `TypedEvent` instead: every field of every event. A file the
stream cannot split is decoded whole into `Trace` (each event a raw slice of the file), then a chunk
of those slices at a time into `TypedEvent`.
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


# `args` decoded: an object into Args, anything else kept as it is (and read as absent)
_DecodedArgs = Union[Args, None, list, str, int, float, bool]


class _Timed(msgspec.Struct, gc=False):
    """The fields of an event that a group of events reads, besides its phase, id and args."""
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None


class Event(_Timed, gc=False):
    ph: Any = None
    id: Any = None
    args: _RawOpt = _EMPTY


class TypedEvent(Event, gc=False):
    args: _DecodedArgs = None  # type: ignore[assignment]  # narrows Event.args: msgspec decodes what Event keeps raw


class Complete(_Timed, tag="X", tag_field="ph", gc=False):
    """A complete event (phase X): every field a group of events reads."""
    args: _DecodedArgs = None


class _Flow(msgspec.Struct, gc=False):
    """A flow event: what a fwdbwd flow is kept as (its id, thread and time), and its category."""
    cat: Any = None
    id: Any = None
    tid: Any = None
    ts: Any = None


class FlowStart(_Flow, tag="s", tag_field="ph", gc=False):
    pass


class FlowEnd(_Flow, tag="f", tag_field="ph", gc=False):
    pass


# The Trace Event Format's other phases: events the parser routes nowhere, decoded into nothing (their
# fields skipped). Of hta_df_index_resolver's 216,092 events, 64,663 are ac2g flows and 28,010 instant
# events (the complete events' links come from their args): decoding and routing its 26 batches takes
# 255.6 ms against 291.8 with every field of every event (0.876; h200_moe/overlap 0.951;
# bench/bench_decode.py, medians of 3 interleaved pairs of 7 rounds).
OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "t", "P", "N", "O", "D", "M",
                "V", "v", "R", "c", "(", ")")
_UNREAD = tuple(msgspec.defstruct(f"Unread{i}", [], tag=ph, tag_field="ph", gc=False)
                for i, ph in enumerate(OTHER_PHASES))
# a list of events as the stream decodes them (msgspec refuses an event of another phase, or whose
# phase is not a string: the stream then decodes that batch into TypedEvent, kineto_stream._decode_events)
STREAM_EVENTS: Any = list[Union[(Complete, FlowStart, FlowEnd, *_UNREAD)]]  # type: ignore[valid-type]


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
    """Every event and its args decoded at once, as the stream decodes them (the floor the benchmarks
    compare with)."""
    traceEvents: Optional[STREAM_EVENTS] = None  # the decoded form of Trace.traceEvents
