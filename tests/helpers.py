"""Build small canonical profiles by hand for golden tests of the SQL queries."""
from __future__ import annotations

from pathlib import Path

from traceview import schema
from traceview.engine.session import Session
from traceview.profile import Profile

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TRACES = SHARED / "traces"


def ops_and_kernels_trace(folder: Path, n: int, edit=None) -> Path:
    """A small Kineto trace `folder/t.json`: n CPU ops 100 us apart, each launching one 20 us
    kernel (linked by External id and correlation); `edit(events)` may change the event list first."""
    import json
    ev = []
    for k in range(n):
        ev.append({"ph": "X", "cat": "cpu_op", "name": f"op{k}", "pid": 1, "tid": 2, "ts": 100 * k, "dur": 50,
                   "args": {"External id": k + 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": f"k{k}", "pid": 0, "tid": 7, "ts": 100 * k + 10,
                   "dur": 20, "args": {"correlation": k + 1, "External id": k + 1, "device": 0, "stream": 7}})
    if edit is not None:
        edit(ev)
    f = folder / "t.json"
    f.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return f


def make_profile(cpu=(), launches=(), gpu=(), syncs=(), ranks=(0,), gpu_name="NVIDIA H100 80GB HBM3") -> Profile:
    """cpu: dicts with id, tid, start_ns, end_ns, kind, name (+ optional fields);
    launches: dicts with id, tid, start_ns, end_ns, name, correlation (+op_id);
    gpu: dicts with id, start_ns, end_ns, kind, name, stream, correlation, launch_id (+ optional)."""
    def table(name, rows, defaults):
        cols = {f.name: [] for f in schema.TABLES[name]}
        for r in rows:
            full = {**defaults, **r}
            for k in cols:
                cols[k].append(full.get(k))
        return schema.from_pydict(name, cols)

    return Profile(
        cpu_ranges=table("cpu_ranges", cpu, {"rank": 0, "pid": 1, "kind": "annotation", "depth": 0}),
        launches=table("launches", launches, {"rank": 0, "pid": 1, "api": "runtime", "name": "cudaLaunchKernel"}),
        gpu_activities=table("gpu_activities", gpu, {"rank": 0, "device": 0, "kind": "kernel"}),
        syncs=table("syncs", syncs, {"rank": 0}),
        meta=table("meta", [{"rank": r} for r in ranks],
                   {"world_size": len(ranks), "source_format": "test", "source_file": "hand-made",
                    "gpu_name": gpu_name, "device": 0, "rank_source": "test"}),
    )


def analyze_paths(paths) -> dict:
    """The analyze document (critical path, stalls and collectives included) for trace paths."""
    from traceview.document.assemble import assemble
    from traceview.engine.session import Session
    from traceview.load import load
    p = load([str(x) for x in paths])
    return assemble(p, session=Session(p))


class SpySession(Session):
    """A session given `step_threads` cores (and `parallel_min_rows` where given) that notes the
    steps it builds itself (`made`), the early tables it adopts (`adopted`), and in `order` what it
    made and what it took as a reader made it ("taken <name>"), in the order they came."""
    def __init__(self, profile, step_threads: int, min_rows: int | None = None):
        super().__init__(profile)
        self.step_threads = step_threads
        if min_rows is not None:
            self.parallel_min_rows = min_rows
        self.made: list[str] = []
        self.adopted: list[str] = []
        self.order: list[str] = []

    def materialize_sql(self, name, *a, **k):
        self.made.append(name)
        self.order.append(name)
        super().materialize_sql(name, *a, **k)

    def materialize_arrow(self, name, table):
        self.made.append(name)
        self.order.append(name)
        super().materialize_arrow(name, table)

    def adopt(self, name, table, params):
        self.adopted.append(name)
        super().adopt(name, table, params)

    def adopt_made(self, name, rows):
        self.order.append("taken " + name)
        super().adopt_made(name, rows)
