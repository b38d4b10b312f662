"""When each rank's trace was captured (UTC), for the report's `inputs` and for ordering nightly runs.

The rule is one for every format: the capture time of a rank is its earliest recorded event
(GPU activity, CPU range, API call or sync) on the UNIX epoch clock, i.e. `meta.clock_offset_ns + min(start_ns)`.
The offset is Kineto's `baseTimeNanoseconds` or the nsys session start
(`TARGET_INFO_SESSION_START_TIME.utcEpochNs`, to which nsys timestamps are relative). Kineto
traces written before `baseTimeNanoseconds` existed carry epoch microseconds themselves: with no
offset, timestamps at or after EPOCH_MIN_NS are taken as epoch time. A trace with neither falls
back to its file's modification time, and `capture_source` says so; when even that is not
available the capture time is null.
"""
from __future__ import annotations

import datetime as dt
import os
from typing import overload

import pyarrow as pa

from ..engine.steps import python_step
from ..profile import Profile

# 2001-09-09T01:46:40Z: no monotonic clock (boot-relative) or session-relative timestamp reaches it,
# every epoch timestamp of a GPU trace is past it.
EPOCH_MIN_NS = 10 ** 18

SOURCE_OFFSET = {"kineto": "trace: baseTimeNanoseconds + first event",
                 "nsys": "trace: session start (TARGET_INFO_SESSION_START_TIME) + first event"}
SOURCE_ABSOLUTE = "trace: first event (epoch timestamps)"
SOURCE_MTIME = "file mtime (the trace records no capture time)"
SOURCE_NONE = "unknown (the trace records no capture time and the file has no readable mtime)"


@overload
def utc_text(epoch_ns: int) -> str: ...
@overload
def utc_text(epoch_ns: None) -> None: ...
@overload
def utc_text(epoch_ns: int | None) -> str | None: ...
def utc_text(epoch_ns: int | None) -> str | None:
    """ISO 8601 in UTC with microseconds and a `Z`, e.g. `2026-11-30T00:53:45.202996Z`."""
    if epoch_ns is None:
        return None
    t = dt.datetime.fromtimestamp(epoch_ns // 1000 / 1e6, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@python_step("rank_first_event", scope="rank", requires=("gpu_activities", "cpu_ranges", "launches", "syncs"),
             produces=("rank", "first_ns"))
def rank_first_event(session, params: dict) -> pa.Table:
    """rank -> earliest start_ns (first_event_ns) as a step: per rank, so that a mapped job's
    workers compute it over their ranks and this process reads one row per rank instead of the
    start of every row of the job."""
    union = " UNION ALL ".join(f"SELECT rank, min(start_ns) AS s FROM {t} GROUP BY rank"
                               for t in ("gpu_activities", "cpu_ranges", "launches", "syncs"))
    return session.sql(f"SELECT rank, min(s) AS first_ns FROM ({union}) WHERE s IS NOT NULL "
                       "GROUP BY rank ORDER BY rank")


def first_events(session) -> dict[int, int]:
    """first_event_ns of the session's profile, from the rank_first_event step."""
    from ..engine.pipeline import build
    build(session, ["rank_first_event"])
    return {r["rank"]: r["first_ns"] for r in session.rows("SELECT rank, first_ns FROM rank_first_event")}


def first_event_ns(profile: Profile) -> dict[int, int]:
    """rank -> earliest start_ns over the rank's GPU activities, CPU ranges, API calls and syncs
    (its own clock)."""
    out: dict[int, int] = {}
    for t in (profile.gpu_activities, profile.cpu_ranges, profile.launches, profile.syncs):
        if t.num_rows == 0:
            continue
        g = pa.table({"rank": t.column("rank"), "start_ns": t.column("start_ns")}).group_by("rank").aggregate(
            [("start_ns", "min")])
        for r, s in zip(g.column("rank").to_pylist(), g.column("start_ns_min").to_pylist(), strict=True):
            if s is not None and (r not in out or s < out[r]):
                out[r] = s
    return out


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except (OSError, ValueError):
        return None


def capture_of(meta_row: dict, first_ns: int | None) -> tuple[int | None, str]:
    """(epoch ns, source) for one rank's meta row and its earliest event."""
    offset = meta_row.get("clock_offset_ns")
    fmt = meta_row.get("source_format") or ""
    if offset is not None and first_ns is not None:
        return offset + first_ns, SOURCE_OFFSET.get(fmt, "trace: clock offset + first event")
    if offset is not None:
        return offset, SOURCE_OFFSET.get(fmt, "trace: clock offset").replace(
            " + first event", "")
    if first_ns is not None and first_ns >= EPOCH_MIN_NS:
        return first_ns, SOURCE_ABSOLUTE
    m = _mtime_ns(meta_row.get("source_file") or "")
    return (m, SOURCE_MTIME) if m is not None else (None, SOURCE_NONE)


def capture_fields(profile: Profile, first: dict[int, int] | None = None) -> dict[int, dict]:
    """rank -> {"capture_time", "capture_epoch_ns", "capture_source"} for the report's inputs
    (`first`: first_event_ns of the profile where the caller has it)."""
    first = first_event_ns(profile) if first is None else first
    out = {}
    for m in profile.meta.to_pylist():
        ns, source = capture_of(m, first.get(m["rank"]))
        out[m["rank"]] = {"capture_time": utc_text(ns), "capture_epoch_ns": ns, "capture_source": source}
    return out


def job_capture_ns(doc: dict) -> int | None:
    """The capture time of a report's job: its earliest rank (None when no rank records one)."""
    vals = [i.get("capture_epoch_ns") for i in doc.get("inputs") or []]
    vals = [v for v in vals if isinstance(v, int) and not isinstance(v, bool)]
    return min(vals) if vals else None

