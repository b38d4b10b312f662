"""`traceview export --perfetto`: a valid trace-event file (checked by an independent reader written
from the format's specification) whose added tracks carry the report's numbers."""
import collections
import gzip
import itertools
import json
import subprocess
import sys
from decimal import Decimal

import pytest
import trace_event_check as tec
from helpers import ROOT, TRACES

import traceview

OVERLAP = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"
DLRM = TRACES / "kineto" / "dlrm_8rank_v100"
FIXTURE = ROOT / "fixtures" / "h200_moe_overlap.json.gz"
CLASS_FIELDS = {"compute": "compute_ns", "exposed communication": "exposed_comm_ns",
                "exposed memory": "exposed_memory_ns", "idle": "idle_ns",
                "overlapped communication": "overlapped_comm_ns"}


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def export(tmp_path, *traces, name="out.json"):
    out = tmp_path / name
    r = cli("export", "--perfetto", out, *traces)
    assert r.returncode == 0, r.stderr
    return out


def tracks(obj, prefix: str) -> dict:
    """{pid: [slices of the tracks whose name starts with prefix]} (a track and its "(2)" lanes)."""
    names = tec.thread_names(obj)
    out: dict = {}
    for key, sl in tec.slices(obj).items():
        if names.get(key, "").startswith(prefix):
            out.setdefault(key[0], []).extend(sl)
    return out


def in_window(sl, a, b):
    return [x for x in sl if a <= x[0] and x[1] <= b]


@pytest.fixture(scope="module")
def overlap(tmp_path_factory):
    if not OVERLAP.exists():
        pytest.skip("shared H200 traces not available")
    out = export(tmp_path_factory.mktemp("perfetto"), OVERLAP)
    return tec.read(out), traceview.open(OVERLAP).report()


def windows(obj, report):
    """Each step row with its window in the export's time: the rank's clock offset added (the ranks
    of a job line up), the origin subtracted."""
    origin = int(obj["otherData"]["origin_ns"])
    for st in report["steps"]:
        off = int(report["clock"]["ranks"][str(st["rank"])]["offset_ns"])
        a = Decimal(st["start_ns"] + off - origin)
        yield st, a, a + st["step_time_ns"]


def test_overlap_export_passes_the_independent_reader(overlap):
    obj, report = overlap
    assert tec.check(obj) == []
    # every time is a whole number of nanoseconds (the export's resolution is 1 ns, exact)
    for e in tec.events_of(obj):
        for k in ("ts", "dur"):
            if k in e:
                assert tec.ns(e[k]) == int(tec.ns(e[k]))
    names = set(tec.thread_names(obj).values())
    assert {"steps", "GPU time class", "critical path", "stalls", "layer / phase / stage"} <= names
    assert tec.thread_names(obj)[(1, None)] == "rank 0 (NVIDIA H200)"


def test_class_track_totals_equal_the_reports_breakdown(overlap):
    obj, report = overlap
    cls = tracks(obj, "GPU time class")[1]
    assert len(report["steps"]) == 3
    for st, a, b in windows(obj, report):
        mine = in_window(cls, a, b)
        tot = collections.Counter()
        for s, e, name, _ in mine:
            tot[name] += e - s
        for name, field in CLASS_FIELDS.items():
            assert tot[name] == st[field], (st["step"], name)       # to the nanosecond
        # the four partition classes tile the window with no gap and no overlap
        top = sorted((s, e) for s, e, n, _ in mine if n != "overlapped communication")
        assert top[0][0] == a and top[-1][1] == b
        assert all(x[1] == y[0] for x, y in itertools.pairwise(top))
    assert sum(len(in_window(cls, a, b)) for _, a, b in windows(obj, report)) == len(cls)


def test_critical_path_and_stall_tracks_equal_the_report(overlap):
    obj, report = overlap
    cp, stl = tracks(obj, "critical path")[1], tracks(obj, "stalls")[1]
    cats = {"compute": "compute_ns", "all-to-all": "all_to_all_ns", "other communication": "other_comm_ns",
            "launch-bound": "launch_bound_ns", "host sync": "host_sync_ns", "idle": "idle_ns"}
    paths = {(p["rank"], p["step"]): p for p in report["critical_path"]}
    n_stalls = 0
    for st, a, b in windows(obj, report):
        p = paths[(st["rank"], st["step"])]
        tot = collections.Counter()
        for s, e, name, _ in in_window(cp, a, b):
            tot[cats[name]] += e - s
        assert dict(tot) == {k: p[k] for k in cats.values() if p[k]}
        assert sum(tot.values()) == st["step_time_ns"]
        causes = collections.Counter()
        mine = in_window(stl, a, b)
        for s, e, name, _ in mine:
            causes[name] += e - s
        assert dict(causes) == {k: v for k, v in p["stalls_by_cause"].items() if v}
        n_stalls += len({(ev["args"]["cause"], ev["args"]["stall_start_ns"]) for *_, ev in mine})
    assert n_stalls == len(report["stalls"])     # every stall row of the report, no other


def test_layer_track_equals_the_reports_layers(overlap):
    obj, report = overlap
    lay = tracks(obj, "layer / phase / stage")[1]
    assert not any(" + " in n for _, _, n, _ in lay)   # no moment shared by two groups in this trace
    for st, a, b in windows(obj, report):
        mine = in_window(lay, a, b)
        by = collections.Counter()
        for s, e, _name, ev in mine:
            if ev["cat"] == "traceview.stage":
                g = ev["args"]
                by[(g["layer"], g["phase"], g["stage"])] += e - s
        want = collections.Counter()
        for r in report["layers"]:
            if (r["rank"], r["step"]) == (st["rank"], st["step"]):
                layer = {"layer": f"layer {r['layer']}", "outside": "outside layers"}.get(r["region"], "unattributed")
                want[(layer, r["phase"], r["stage"])] += r["step_time_ns"]
        assert by == want
        assert sum(e - s for s, e, _, ev in mine if ev["cat"] == "traceview.layer") == st["step_time_ns"]


def test_gpu_activities_are_the_traces(overlap):
    obj, _ = overlap
    raw = json.load(gzip.open(OVERLAP))
    gpu = [e for e in raw["traceEvents"]
           if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    streams = [x for sl in tracks(obj, "GPU 0 stream ").values() for x in sl]
    assert len(streams) == len(gpu) == 7380
    assert collections.Counter(n for _, _, n, _ in streams) == collections.Counter(e["name"] for e in gpu)
    by_stream = collections.Counter(e["args"]["stream"] for e in gpu)
    names = tec.thread_names(obj)
    per_track = collections.Counter()
    for key, sl in tec.slices(obj).items():
        if names[key].startswith("GPU 0 stream "):
            per_track[int(names[key].split()[3])] += len(sl)
    assert per_track == by_stream
    # durations: Kineto's microseconds against the export's nanoseconds (the parser rounds to 1 ns)
    got = sorted(e - s for s, e, _, _ in streams)
    want = sorted(Decimal(str(e["dur"])) * 1000 for e in gpu)
    assert max(abs(x - y) for x, y in zip(got, want, strict=True)) <= 1


def test_multi_rank_job_one_process_per_rank(tmp_path):
    if not DLRM.exists():
        pytest.skip("shared DLRM traces not available")
    out = export(tmp_path, DLRM, name="dlrm.json.gz")
    obj = tec.read(out)
    assert tec.check(obj) == []
    names = tec.thread_names(obj)
    assert sorted(v for (pid, tid), v in names.items() if tid is None) == \
        [f"rank {r} (Tesla V100-SXM2-32GB)" for r in range(8)]
    report = json.loads(cli("analyze", DLRM, "-f", "json").stdout)
    cls = tracks(obj, "GPU time class")
    for st, a, b in windows(obj, report):
        tot = collections.Counter()
        for s, e, name, _ in in_window(cls[st["rank"] + 1], a, b):
            tot[name] += e - s
        assert {n: tot[n] for n in CLASS_FIELDS} == {n: st[f] for n, f in CLASS_FIELDS.items()}


HOSTILE = 'evil"\\ \n\t\x01\x1b[31m</script><img src=x> \u2028 é kernel'


def test_hostile_names_are_escaped(tmp_path):
    raw = json.load(gzip.open(FIXTURE))
    k = next(e for e in raw["traceEvents"] if e.get("cat") == "kernel")
    k["name"] = HOSTILE
    src = tmp_path / "hostile.json"
    src.write_text(json.dumps(raw))
    out = export(tmp_path, src)
    data = out.read_bytes()
    assert all(b < 0x80 for b in data)          # ASCII only: control characters and the rest escaped
    assert b"\x1b" not in data and b"</script>" in data   # inside a JSON string, harmless there
    obj = tec.read(out)
    assert tec.check(obj) == []
    streams = [n for sl in tracks(obj, "GPU 0 stream ").values() for _, _, n, _ in sl]
    assert HOSTILE in streams


def test_writer_neutralizes_lone_surrogates():
    """The parsers reject a lone surrogate (not valid JSON text for them); the writer still never
    writes one, whatever a future reader hands it."""
    from traceview.trace_events import Writer
    w = Writer(0)
    tid = w.thread(1, "t\ud800", 0)
    w.slice(1, tid, 5, 7, "k\udfff", "c", {"x\ud800": "\ud800"})
    obj = json.loads(w.text(), parse_float=Decimal)
    assert tec.check(obj) == []
    assert [n for sl in tec.slices(obj).values() for _, _, n, _ in sl] == ["k?"]


def test_bad_input_one_line_exit_2_nothing_written(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    for args in ([tmp_path / "missing.json"], [empty], [FIXTURE, "--step-regex", "("]):
        out = tmp_path / "out.json"
        r = cli("export", "--perfetto", out, *args)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("traceview: ") and "Traceback" not in r.stderr
        assert not out.exists() and not list(tmp_path.glob(".out.json*"))
    assert str(tmp_path / "missing.json") in cli("export", "--perfetto", tmp_path / "o.json",
                                                 tmp_path / "missing.json").stderr
    r = cli("export", FIXTURE)
    assert r.returncode == 2 and r.stderr == "traceview: export: choose the output: --perfetto OUT\n"


def test_export_is_lazy_at_startup():
    code = "import sys, traceview.cli; bad = [m for m in ('traceview.export_perfetto', 'traceview.trace_events', " \
           "'traceview.api') if m in sys.modules]; assert not bad, bad"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "export" in cli("--help").stdout


# --- the reader itself must reject what the specification forbids ---------------------------------

def _ok(events):
    return {"traceEvents": [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "t"}}] + events}


@pytest.mark.parametrize("event,problem", [
    ({"ph": "X", "pid": 1, "tid": 1, "ts": 0, "name": "a"}, "without a numeric dur"),
    ({"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": -1, "name": "a"}, "negative dur"),
    ({"ph": "X", "pid": "1", "tid": 1, "ts": 0, "dur": 1, "name": "a"}, "pid is not an integer"),
    ({"ph": "X", "pid": 1, "tid": 1, "dur": 1, "name": "a"}, "ts missing"),
    ({"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1}, "name missing"),
    ({"ph": "Q", "pid": 1, "tid": 1, "ts": 0, "name": "a"}, "not a trace-event phase"),
    ({"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {}}, "needs args.name"),
    ({"ph": "M", "pid": 1, "tid": 1, "name": "thread_sort_index", "args": {"sort_index": "1"}}, "args.sort_index"),
    ({"ph": "B", "pid": 1, "tid": 1, "ts": 0, "name": "a"}, "never ended"),
    ({"ph": "E", "pid": 1, "tid": 1, "ts": 0}, "E without a matching B"),
    ({"ph": "C", "pid": 1, "tid": 1, "ts": 0, "name": "c", "args": {"v": "x"}}, "counter args"),
    ({"ph": "b", "pid": 1, "tid": 1, "ts": 0, "name": "a", "cat": "c"}, "async event without id"),
    ({"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "name": "\ud800"}, "lone surrogate"),
])
def test_reader_rejects(event, problem):
    errs = tec.check(_ok([event]))
    assert errs and any(problem in e for e in errs), errs


def test_reader_rejects_partial_overlap_and_accepts_nesting():
    a = {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "a"}
    inner = {"ph": "X", "pid": 1, "tid": 1, "ts": 2, "dur": 8, "name": "b"}
    assert tec.check(_ok([a, inner])) == []
    crossing = dict(inner, ts=5, dur=10)
    assert any("without nesting" in e for e in tec.check(_ok([a, crossing])))
    other_thread = dict(crossing, tid=2)
    assert tec.check(_ok([a, other_thread])) == []
    assert any("displayTimeUnit" in e for e in tec.check({"traceEvents": [], "displayTimeUnit": "us"}))
    with pytest.raises(ValueError):
        json.loads('{"traceEvents": [{"ts": NaN}]}', parse_constant=tec._no_constants)
    with pytest.raises(ValueError):   # a raw control character inside a string is not JSON
        json.loads('{"traceEvents": [{"name": "a\x01"}]}')


# --- a hand-made job: numbers by hand --------------------------------------------------------------

def _hand_profile(extra_gpu=(), extra_launches=()):
    from helpers import make_profile
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=1000, name="ProfilerStep#1"),
           dict(id=2, tid=1, start_ns=25, end_ns=40, name="c10d::allreduce_", kind="op", depth=1, parent_id=1),
           dict(id=3, tid=1, start_ns=55, end_ns=70, name="c10d::alltoall_base_", kind="op", depth=1, parent_id=1),
           dict(id=4, tid=1, start_ns=2000, end_ns=3000, name="ProfilerStep#2")]
    launches = [dict(id=11, tid=1, start_ns=10, end_ns=12, correlation=1),
                dict(id=12, tid=1, start_ns=20, end_ns=22, correlation=2),
                dict(id=13, tid=1, start_ns=30, end_ns=32, correlation=3, op_id=2),
                dict(id=14, tid=1, start_ns=50, end_ns=52, correlation=4, name="cudaMemcpyAsync"),
                dict(id=15, tid=1, start_ns=60, end_ns=62, correlation=5, name="cudaMemcpyAsync", op_id=3),
                dict(id=16, tid=1, start_ns=80, end_ns=82, correlation=6),
                dict(id=17, tid=1, start_ns=1500, end_ns=1502, correlation=7),
                dict(id=18, tid=1, start_ns=2100, end_ns=2102, correlation=8),
                dict(id=19, tid=1, start_ns=2200, end_ns=2202, correlation=9), *extra_launches]
    gpu = [dict(id=21, stream=7, start_ns=100, end_ns=300, name="gemm_a", correlation=1, launch_id=11),
           dict(id=22, stream=7, start_ns=300, end_ns=400, name="elementwise", correlation=2, launch_id=12),
           dict(id=23, stream=20, start_ns=250, end_ns=500, name="ncclDevKernel_AllReduce", correlation=3,
                launch_id=13),
           dict(id=24, stream=7, start_ns=600, end_ns=650, kind="memcpy", name="Memcpy HtoD", correlation=4,
                launch_id=14),
           dict(id=25, stream=20, start_ns=640, end_ns=700, kind="memcpy", name="Memcpy DtoD", correlation=5,
                launch_id=15),
           # launched in step 1, runs into step 2: the two step windows overlap
           dict(id=26, stream=11, start_ns=800, end_ns=2350, name="long_kernel", correlation=6, launch_id=16),
           dict(id=27, stream=7, start_ns=1600, end_ns=1700, name="late_kernel", correlation=7, launch_id=17),
           dict(id=28, stream=7, start_ns=2300, end_ns=2400, name="gemm_b", correlation=8, launch_id=18),
           dict(id=29, stream=9, start_ns=2350, end_ns=2500, name="void dpsk::ep::dispatch<8>(int)", correlation=9,
                launch_id=19), *extra_gpu]
    return make_profile(cpu, launches, gpu)


def _hand_export(profile):
    from traceview.document.assemble import assemble
    from traceview.engine.session import Session
    from traceview.export_perfetto import build
    s = Session(profile)
    doc = assemble(profile, session=s)
    return json.loads(build(doc, s), parse_float=Decimal), doc


def _totals(obj, track):
    names = tec.thread_names(obj)
    tot = collections.Counter()
    for key, sl in tec.slices(obj).items():
        if names[key] == track:
            for s, e, n, _ in sl:
                tot[n] += int(e - s)
    return dict(tot)


def test_hand_made_job_class_tracks_by_hand():
    obj, _ = _hand_export(_hand_profile())
    assert tec.check(obj) == []
    assert obj["otherData"]["origin_ns"] == "100"            # the earliest GPU activity
    # step 1, window [100, 2350): [100,250) compute, [250,400) compute + comm (overlapped), [400,500) comm,
    # [500,600) idle, [600,640) memcpy, [640,700) memcpy + comm (comm), [700,800) idle, [800,2350) compute
    assert _totals(obj, "GPU time class") == {"compute": 1850, "exposed communication": 160, "exposed memory": 40,
                                              "idle": 200, "overlapped communication": 150}
    # step 2, window [2300, 2500), overlapping step 1: on a second track; [2300,2350) compute,
    # [2350,2400) compute + DeepEP dispatch, [2400,2500) dispatch alone
    assert _totals(obj, "GPU time class (2)") == {"compute": 100, "exposed communication": 100,
                                                  "overlapped communication": 50}
    assert _totals(obj, "steps") == {"step 1": 2250} and _totals(obj, "steps (2)") == {"step 2": 200}
    assert _totals(obj, "GPU 0 stream 11") == {"long_kernel": 1550}
    ev = next(e for e in obj["traceEvents"] if e.get("name") == "long_kernel")
    assert ev["ts"] == Decimal("0.700") and ev["dur"] == Decimal("1.550")   # microseconds, exact
    assert ev["args"]["id"] == 26 and ev["args"]["class"] == "compute" and ev["args"]["step"] == 1


def test_overlapping_activities_of_one_stream_get_a_second_track():
    extra = dict(id=30, stream=7, start_ns=350, end_ns=450, name="overlapping", correlation=10, launch_id=20)
    launch = dict(id=20, tid=1, start_ns=90, end_ns=92, correlation=10)
    obj, _ = _hand_export(_hand_profile([extra], [launch]))
    assert tec.check(obj) == []
    assert _totals(obj, "GPU 0 stream 7 (2)") == {"overlapping": 100}
    assert "overlapping" not in _totals(obj, "GPU 0 stream 7")
