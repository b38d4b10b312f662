"""traceview/forking.py: a child's reaping on a thread (`reap_later`) is joined by `settle`, before
any fork (`fork_safe`) and at the interpreter's exit, the command's own exit (`exit_now`) included."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from traceview import forking


def test_fork_safe_waits_for_a_reaping_under_way():
    done: list[str] = []
    started = threading.Event()

    def reap():
        started.set()
        time.sleep(0.3)
        done.append("reaped")
    forking.reap_later(reap)
    started.wait(5)
    assert done == []          # still under way
    forking.fork_safe()        # (whatever it answers: other tests' threads may run in this process)
    assert done == ["reaped"] and forking._REAPERS == []


def test_settle_joins_every_reaping_and_then_returns_at_once():
    done: list[int] = []
    for i in range(3):
        forking.reap_later(lambda i=i: (time.sleep(0.1 * (3 - i)), done.append(i)))
    forking.settle()
    assert sorted(done) == [0, 1, 2] and forking._REAPERS == []
    t = time.perf_counter()
    forking.settle()
    assert time.perf_counter() - t < 0.1


def test_the_exit_waits_are_registered_once_however_many_reapings(monkeypatch):
    import atexit
    registered: list = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(forking, "_AT_EXIT", [])
    for _ in range(3):
        forking.reap_later(lambda: None)
        forking.settle()
    assert registered == [forking.settle]


_AT_EXIT = """
import sys, time
from pathlib import Path
from traceview import forking
out = Path(sys.argv[1])
forking.reap_later(lambda: (time.sleep(0.4), out.write_text("reaped")))
if sys.argv[2] == "exit_now":
    from traceview.launch import exit_now
    exit_now(0)
"""


@pytest.mark.parametrize("how", ["normal", "exit_now"])
def test_a_reaping_under_way_ends_before_the_process_does(tmp_path, how):
    """The reaping thread is a daemon (it never keeps the command from its fast exit), so the exit
    itself must wait for it: else a helper's folder of batches would outlive the command."""
    out = tmp_path / "reaped.txt"
    p = subprocess.run([sys.executable, "-c", _AT_EXIT, str(out), how], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert out.read_text() == "reaped"
