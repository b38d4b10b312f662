"""huge_pages: a process that reads a large Kineto trace or nsys export turns transparent huge pages
off for itself (from then on); one that reads only small traces keeps them; a user's own
MIMALLOC_ALLOW_THP decides.
Checked where the kernel tells: the process's `THP_enabled` in /proc/self/status (Linux), read in a
fresh interpreter (its inherited flag cleared first) after the read."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import TRACES

_STATUS = "/proc/self/status"

pytestmark = pytest.mark.skipif(
    not os.path.exists(_STATUS) or "THP_enabled:" not in open(_STATUS).read(),
    reason="the kernel reports no per-process THP setting here")

_CHILD = """
import ctypes, sys
from pathlib import Path
from traceview.parsers import huge_pages, kineto
def thp():
    return [x for x in open("/proc/self/status") if x.startswith("THP_enabled:")][0].split()[1]
# the flag is inherited (fork and exec): a test process that read a large trace in-process passes it on,
# so the child clears it first (PR_SET_THP_DISABLE, 0) and starts from huge pages allowed
ul = ctypes.c_ulong
assert ctypes.CDLL(None, use_errno=True).prctl(41, ul(0), ul(0), ul(0), ul(0)) == 0
before = thp()
huge_pages.MIN_TEXT = huge_pages.MIN_EXPORT = int(sys.argv[2])
if sys.argv[1].endswith(".sqlite"):
    from traceview.parsers import nsys
    nsys.read(Path(sys.argv[1]))
else:
    kineto.read(Path(sys.argv[1]))
print(before, thp())
"""


def _trace(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 7, "ts": 100, "dur": 50,
               "args": {"External id": 1}},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": 110,
               "dur": 5, "args": {"External id": 1, "correlation": 9}},
              {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 3, "ts": 120, "dur": 30,
               "args": {"correlation": 9, "device": 0, "stream": 3}}]
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": events}))
    return f


def _run(f, min_text: int, **env) -> list[str]:
    e = {k: v for k, v in os.environ.items() if k != "MIMALLOC_ALLOW_THP"} | env
    p = subprocess.run([sys.executable, "-c", _CHILD, str(f), str(min_text)], capture_output=True, text=True,
                       timeout=120, env=e)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_a_large_trace_turns_them_off(tmp_path):
    assert _run(_trace(tmp_path), 0) == ["1", "0"]             # the trace counts as large: off after the read


def test_a_small_trace_keeps_them(tmp_path):
    f = _trace(tmp_path)
    assert _run(f, f.stat().st_size + 1) == ["1", "1"]          # smaller than the threshold: left alone


NSYS = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"


@pytest.mark.skipif(not NSYS.is_file(), reason=f"{NSYS} not present")
@pytest.mark.parametrize(("over", "state"), [(0, "0"), (1, "1")])
def test_an_nsys_export_by_its_size(over, state):
    # at its own size it counts as large (off after the read); one byte more, it is left alone
    assert _run(NSYS, NSYS.stat().st_size + over) == ["1", state]


def test_a_users_own_setting_is_kept(tmp_path):
    assert _run(_trace(tmp_path), 0, MIMALLOC_ALLOW_THP="1") == ["1", "1"]

