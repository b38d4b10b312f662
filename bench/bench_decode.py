"""The Kineto stream's decode and routing of a trace's batches: the stream's union of events
(`kineto_events.STREAM_EVENTS`: each phase decoded into only what the parser reads of it) against
every field of every event (`TypedEvent`, as the whole read and the stream before it decoded them).

    python bench/bench_decode.py [TRACE.json.gz ...] [--rounds 7] [--pairs 3]

The trace's events are cut into batches of `kineto_stream.TEXT_BYTES` of text, as the stream cuts
them; each variant then decodes and routes every batch (`route_part`; the every-field events through
the whole read's `_route_chunk`), one batch's events alive at a time. Each variant runs in a child
process of its own, the two interleaved `--pairs` times; a child prints the min and median of its
`--rounds` passes and its peak RSS. Prints the events by phase, then the medians side by side.
"""
from __future__ import annotations

import argparse
import gc
import gzip
import json
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "kineto"
DEFAULT = [SHARED / "hta_df_index_resolver" / "df_index_resolver.json.gz", SHARED / "h200_moe" / "overlap.json.gz"]


def _batches(path: Path) -> tuple[list[bytes], Counter]:
    import msgspec

    from traceview.parsers import kineto_stream
    from traceview.parsers.kineto_events import Trace

    class _Phase(msgspec.Struct):
        ph: object = None

    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    events = msgspec.json.decode(raw, type=Trace).traceEvents or []
    phases = Counter(e.ph for e in msgspec.json.decode(b"[" + b",".join(events) + b"]", type=list[_Phase]))
    out: list[bytes] = []
    cur: list = []
    size = 0
    for e in events:
        cur.append(e)
        size += len(e) + 1
        if size >= kineto_stream.TEXT_BYTES:
            out.append(b"[" + b",".join(cur) + b"]")
            cur, size = [], 0
    if cur:
        out.append(b"[" + b",".join(cur) + b"]")
    return out, phases


def _child(variant: str, path: Path, rounds: int) -> None:
    import msgspec

    from traceview.parsers import kineto, kineto_stream
    from traceview.parsers.no_dateutil import no_dateutil_search
    no_dateutil_search()   # as the command and the parse's helper do
    gc.disable()           # as the parse does
    batches, _ = _batches(path)
    typed = msgspec.json.Decoder(list[kineto.TypedEvent])

    def every_field(text: bytes) -> None:
        evs = typed.decode(text)
        part = kineto._Part()
        for i in range(0, len(evs), kineto.CHUNK_EVENTS):
            kineto._route_chunk(evs[i:i + kineto.CHUNK_EVENTS], part)

    def stream(text: bytes) -> None:
        kineto.route_part(kineto_stream.decode_text(text))

    fn = every_field if variant == "every-field" else stream
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        for text in batches:
            fn(text)
        ts.append(time.perf_counter() - t)
    print(json.dumps({"min": min(ts), "median": statistics.median(ts),
                      "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("VARIANT", "TRACE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(a.child[0], Path(a.child[1]), a.rounds)
        return
    for path in a.traces:
        batches, phases = _batches(path)
        print(f"{path.name}: {sum(phases.values()):,} events in {len(batches)} batches; by phase "
              + ", ".join(f"{k} {v:,}" for k, v in phases.most_common()))
        got: dict[str, list] = {"every-field": [], "stream": []}
        for _ in range(a.pairs):
            for variant in got:
                r = subprocess.run([sys.executable, __file__, "--child", variant, str(path), "--rounds", str(a.rounds)],
                                   capture_output=True, text=True, check=True)
                got[variant].append(json.loads(r.stdout))
        for variant, runs in got.items():
            med_ms = statistics.median(r["median"] for r in runs) * 1e3
            min_ms = min(r["min"] for r in runs) * 1e3
            rss = max(r["rss_mib"] for r in runs)
            print(f"  {variant:12s} decode + route: median {med_ms:7.1f} ms  min {min_ms:7.1f} ms"
                  f"   peak RSS {rss:6.0f} MiB")
        med = {v: statistics.median(r["median"] for r in runs) for v, runs in got.items()}
        print(f"  stream / every-field: {med['stream'] / med['every-field']:.3f}")


if __name__ == "__main__":
    main()
