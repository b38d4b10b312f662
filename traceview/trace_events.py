"""A writer of the Chrome trace-event JSON format (what ui.perfetto.dev and Perfetto's trace processor
open): processes and named threads (metadata events "M"), and complete events "X".

Times are integer nanoseconds relative to an origin, written as exact decimal microseconds
(`ts`/`dur` are microseconds in the format; three decimals carry every nanosecond, and values
relative to the origin stay small enough that a reader's doubles hold them exactly).
Strings from a trace are untrusted: they are written ASCII-only through a JSON encoder (quotes,
backslashes, control characters and non-ASCII escaped), with lone surrogates replaced, so the
file is valid JSON and valid UTF-8 whatever the names hold.
"""
from __future__ import annotations

import json


def us(ns: int) -> str:
    """Integer nanoseconds as an exact JSON number of microseconds ("1234.567")."""
    ns = int(ns)
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}" if r else f"{sign}{q}"


def clean(obj):
    """Strings with lone surrogates replaced (not encodable as UTF-8 otherwise), recursively."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return obj
        except UnicodeEncodeError:
            return obj.encode("utf-8", "replace").decode("utf-8")
    if isinstance(obj, dict):
        return {clean(str(k)): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def jtext(obj) -> str:
    return json.dumps(clean(obj), ensure_ascii=True, allow_nan=False, separators=(",", ":"), default=str)


def lanes(intervals: list[tuple[int, int]]) -> list[int]:
    """A lane per interval such that intervals in one lane never overlap (touching is fine):
    the first lane whose last interval ended at or before the start. Input in start order."""
    ends: list[int] = []
    out = []
    for s, e in intervals:
        for i, last in enumerate(ends):
            if last <= s:
                ends[i] = e
                out.append(i)
                break
        else:
            ends.append(e)
            out.append(len(ends) - 1)
    return out


class Writer:
    """Collects events; `text()` is the whole file. pid/tid are small positive integers chosen by
    the caller (`thread()` hands out tids per process). `shift[pid]` ns are added to every time of
    that process (its clock offset), before the origin is subtracted."""

    def __init__(self, origin_ns: int, other: dict | None = None, shift: dict | None = None):
        self.origin = int(origin_ns)
        self.shift = dict(shift or {})
        self.other = dict(other or {})
        self.events: list[str] = []
        self._tids: dict[tuple[int, str], int] = {}
        self._next: dict[int, int] = {}

    def process(self, pid: int, name: str, sort_index: int) -> None:
        self.events.append(f'{{"ph":"M","pid":{pid},"tid":0,"name":"process_name","args":{jtext({"name": name})}}}')
        self.events.append(f'{{"ph":"M","pid":{pid},"tid":0,"name":"process_sort_index",'
                           f'"args":{{"sort_index":{int(sort_index)}}}}}')

    def thread(self, pid: int, name: str, sort_index: int) -> int:
        """The tid of the track named `name` in process pid (created, with its metadata, on first use)."""
        key = (pid, name)
        if key not in self._tids:
            tid = self._next.get(pid, 1)
            self._next[pid] = tid + 1
            self._tids[key] = tid
            self.events.append(f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_name",'
                               f'"args":{jtext({"name": name})}}}')
            self.events.append(f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_sort_index",'
                               f'"args":{{"sort_index":{int(sort_index)}}}}}')
        return self._tids[key]

    def slice(self, pid: int, tid: int, start_ns: int, end_ns: int, name: str, cat: str,
              args: dict | None = None) -> None:
        dur = max(0, int(end_ns) - int(start_ns))
        a = f',"args":{jtext(args)}' if args else ""
        t0 = int(start_ns) + self.shift.get(pid, 0) - self.origin
        self.events.append(f'{{"ph":"X","pid":{pid},"tid":{tid},"ts":{us(t0)},'
                           f'"dur":{us(dur)},"name":{jtext(name)},"cat":{jtext(cat)}{a}}}')

    def text(self) -> str:
        head = f'{{"displayTimeUnit":"ns","otherData":{jtext(self.other)},"traceEvents":[\n'
        return head + ",\n".join(self.events) + "\n]}\n"
