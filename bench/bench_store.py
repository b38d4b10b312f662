"""The store's cost on a first run: encoding each trace's tables as Parquet, and reading them back.

    python bench/bench_store.py [--job DIR] [--ranks 32] [--trace TRACE] [--rounds 5]

Parses the first RANKS rank files of a generated job (default: the 64-rank job of
fixtures/moe_job.py, made in a temporary folder) and one larger Kineto trace (default: the bundled
h200_moe overlap fixture), then, interleaved over ROUNDS rounds:

- encoding: every table of every trace with the store's Parquet options (store.parquet_options) and
  with pyarrow's defaults (zstd; a dictionary for every column, statistics), CPU time of the encode
  and of the decode (pq.read_table), and the bytes written;
  (a checkout before store.parquet_options: its defaults both times);
- the store itself: `Store.put` of every trace (folders, files, hashes, manifest; a fresh store each
  round) and `Store.lookup` of every trace from it: CPU and wall per trace, files and folders made.

Medians are printed with the ratio store / defaults, and the peak RSS of this process.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traceview import schema, store  # noqa: E402
from traceview.load import parse_checked  # noqa: E402


def defaults(_schema: pa.Schema) -> dict:
    return {"compression": "zstd"}


def encode_round(tables: list[dict], options) -> tuple[float, float, int]:
    bufs = []
    c0 = time.process_time()
    for tabs in tables:
        for t in tabs.values():
            sink = pa.BufferOutputStream()
            pq.write_table(t, sink, **options(t.schema))
            bufs.append(sink.getvalue())
    c1 = time.process_time()
    for b in bufs:
        pq.read_table(pa.BufferReader(b))
    c2 = time.process_time()
    return c1 - c0, c2 - c1, sum(len(b) for b in bufs)


def store_round(work: Path, traces: list[tuple[Path, store.Stored]]) -> tuple[float, float, float, float, int, int]:
    root = work / "store"
    st = store.Store(root)
    c0, w0 = time.process_time(), time.perf_counter()
    for path, got in traces:
        if not st.put(path, got, path.stat(), store.file_hash(path)):
            raise SystemExit(f"{path}: not stored")
    c1, w1 = time.process_time(), time.perf_counter()
    for path, _ in traces:
        if st.lookup(path) is None:
            raise SystemExit(f"{path}: not read back")
    c2, w2 = time.process_time(), time.perf_counter()
    files = folders = 0
    for _, dirs, names in os.walk(root / "entries"):
        folders += len(dirs)
        files += len(names)
    shutil.rmtree(root)
    return c1 - c0, w1 - w0, c2 - c1, w2 - w1, files, folders


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", type=Path, help="a folder of rank files (default: a generated 64-rank job)")
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--trace", type=Path, default=ROOT / "fixtures" / "h200_moe_overlap.json.gz")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        work = Path(tmp)
        job = a.job
        if job is None:
            from fixtures import moe_job
            job = work / "job"
            moe_job.write(job, moe_job.Job(ranks=64))
        files = sorted(p for p in job.iterdir() if p.is_file())[:a.ranks]
        sets = {f"{len(files)} rank files of {job.name}": files, a.trace.name: [a.trace]}
        for label, paths in sets.items():
            traces = []
            for p in paths:
                prof = parse_checked(p)
                traces.append((p, store.Stored(prof.tables(), list(prof.warnings))))
            tables = [got.tables for _, got in traces]
            rows = sum(t.num_rows for tabs in tables for t in tabs.values())
            print(f"{label}: {len(traces)} trace(s), {rows:,} rows in {len(schema.TABLES)} tables each")
            enc: dict[str, list] = {"store": [], "defaults": []}
            puts: list = []
            for _ in range(a.rounds):
                enc["store"].append(encode_round(tables, getattr(store, "parquet_options", defaults)))
                enc["defaults"].append(encode_round(tables, defaults))
                puts.append(store_round(work, traces))
            med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in enc.items()}
            for k, (w, r, size) in med.items():
                print(f"  encode {k:8s}  write cpu {w * 1e3:8.1f} ms  read cpu {r * 1e3:8.1f} ms"
                      f"  {size / 1e6:8.2f} MB")
            s, d = med["store"], med["defaults"]
            print(f"  store / defaults:  write {s[0] / d[0]:.2f}  read {s[1] / d[1]:.2f}  size {s[2] / d[2]:.2f}")
            m = [statistics.median(x[i] for x in puts) for i in range(4)]
            n = len(traces)
            print(f"  Store.put     cpu {m[0] / n * 1e3:7.2f} ms  wall {m[1] / n * 1e3:7.2f} ms a trace;"
                  f"  lookup cpu {m[2] / n * 1e3:7.2f} ms  wall {m[3] / n * 1e3:7.2f} ms a trace;"
                  f"  {puts[0][4] / n:.1f} files, {puts[0][5] / n:.1f} folders a trace")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
