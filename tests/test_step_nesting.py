"""Step ranges matched by one regex that lie inside (or duplicate) another: the outermost is the
step, the inner ones are not steps of their own, and a warning says so."""
from helpers import make_profile

from traceview.document.assemble import assemble
from traceview.document.options import AnalyzeOptions
from traceview.engine.session import Session


def _profile(cpu):
    launches = [dict(id=11, tid=1, start_ns=10, end_ns=12, correlation=1),
                dict(id=12, tid=1, start_ns=1010, end_ns=1012, correlation=2)]
    gpu = [dict(id=21, stream=7, start_ns=100, end_ns=300, name="gemm", correlation=1, launch_id=11),
           dict(id=22, stream=7, start_ns=1100, end_ns=1500, name="gemm", correlation=2, launch_id=12)]
    return make_profile(cpu, launches, gpu)


def _doc(cpu, rx):
    p = _profile(cpu)
    return assemble(p, AnalyzeOptions(step_regex=rx), Session(p))


def test_nested_ranges_of_one_regex_are_one_step():
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=1000, name="iteration"),
           dict(id=2, tid=1, start_ns=5, end_ns=900, name="train_step", depth=1, parent_id=1),
           dict(id=3, tid=1, start_ns=1000, end_ns=2000, name="iteration"),
           dict(id=4, tid=1, start_ns=1005, end_ns=1900, name="train_step", depth=1, parent_id=3)]
    doc = _doc(cpu, r"^(iteration|train_step)$")
    # by hand: two outer ranges, windows [100, 300) and [1100, 1500); the inner ones are dropped
    assert [(s["step"], s["step_time_ns"]) for s in doc["steps"]] == [(1, 200), (2, 400)]
    (w,) = [w for w in doc["warnings"] if "inside or duplicate" in w]
    assert w.startswith("2 range(s)")


def test_duplicate_spans_are_one_step():
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=1000, name="step_1"),
           dict(id=2, tid=1, start_ns=0, end_ns=1000, name="step_1", depth=1, parent_id=1),
           dict(id=3, tid=1, start_ns=1000, end_ns=2000, name="step_2")]
    doc = _doc(cpu, None)
    assert [(s["step"], s["step_time_ns"]) for s in doc["steps"]] == [(1, 200), (2, 400)]
    assert any(w.startswith("1 range(s)") and "inside or duplicate" in w for w in doc["warnings"])


def test_no_warning_without_nesting():
    cpu = [dict(id=1, tid=1, start_ns=0, end_ns=1000, name="step_1"),
           dict(id=3, tid=1, start_ns=1000, end_ns=2000, name="step_2")]
    doc = _doc(cpu, None)
    assert len(doc["steps"]) == 2 and not any("inside or duplicate" in w for w in doc["warnings"])


def test_inputs_in_words():
    from traceview.reports.fmt import inputs_words
    two_procs = [{"file": "run.sqlite", "rank": r, "rank_source": "pid order"} for r in (0, 1)]
    assert inputs_words(two_procs) == "run.sqlite: 1 file, 2 processes (ranks by process order)"
    assert inputs_words(two_procs[:1]) == "run.sqlite"
    per_rank = [{"file": f"rank{r}.json", "rank": r, "rank_source": "distributedInfo"} for r in range(8)]
    assert inputs_words(per_rank) == "8 files"
    mixed = per_rank[:2] + [{"file": "rank1.json", "rank": 9, "rank_source": "x"}]
    assert inputs_words(mixed) == "2 files, 3 ranks"


def test_one_nsys_file_with_two_processes_is_named_so():
    import subprocess
    import sys

    from helpers import TRACES
    f = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
    r = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(f), "-f", "markdown"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert "1 file, 2 processes (ranks by process order)" in first and "2 files" not in first
