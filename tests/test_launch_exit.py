"""launch.exit_now: the command ends without the interpreter's teardown, but with what a normal
exit does that a caller can see: its status, everything written to stdout and stderr (buffered
too), the atexit functions run; and a normal exit where a thread it would wait for still runs."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(body: str, tmp_path) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        import atexit, sys, threading, time
        from pathlib import Path
        from traceview import launch
        out = Path({str(tmp_path / "atexit.txt")!r})
        atexit.register(lambda: out.write_text("ran"))
        """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_exit_now_keeps_status_output_and_atexit(tmp_path):
    p = _run("""
        sys.stdout.write("x" * 100_000)          # buffered, no newline: flushed before the end
        sys.stderr.write("to stderr")
        atexit.register(lambda: print("last words"))
        launch.exit_now(3)
        print("never")
        """, tmp_path)
    assert p.returncode == 3
    assert p.stdout == "x" * 100_000 + "last words\n" and p.stderr == "to stderr"
    assert (tmp_path / "atexit.txt").read_text() == "ran"


def test_exit_now_waits_like_a_normal_exit_for_a_running_thread(tmp_path):
    p = _run("""
        def late():
            time.sleep(0.3)
            print("thread done", flush=True)
        threading.Thread(target=late).start()
        launch.exit_now(4)
        """, tmp_path)
    assert p.returncode == 4 and p.stdout == "thread done\n"
    assert (tmp_path / "atexit.txt").read_text() == "ran"


def test_the_command_ends_through_exit_now(tmp_path):
    """`python -m traceview` (launch.main): its status and output are those of the command line."""
    p = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(tmp_path / "missing.json")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "" and "missing.json" in p.stderr
