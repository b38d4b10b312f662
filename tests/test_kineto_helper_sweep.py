"""The parse helper's folders of batches (parsers/kineto_helper.py: _folder, sweep): a folder left by
a command that was killed together with its helper is removed by the next helper's command; a
folder of a live command, of another PID namespace or of no traceview name is left alone."""
from __future__ import annotations

import os
import subprocess
import sys

from traceview.parsers import kineto_helper


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid        # reaped: no process has it (until the system reuses it, not within this test)


def test_a_gone_commands_folder_is_removed_and_nothing_else(tmp_path, monkeypatch):
    ns = kineto_helper._namespace()
    dead = _dead_pid()
    made = {
        "gone": f"{kineto_helper.FOLDER_PREFIX}{ns}-{dead}-abc",
        "live": f"{kineto_helper.FOLDER_PREFIX}{ns}-{os.getpid()}-abc",
        "parent": f"{kineto_helper.FOLDER_PREFIX}{ns}-{os.getppid()}-abc",
        "other_ns": f"{kineto_helper.FOLDER_PREFIX}{ns}1-{dead}-abc",
        "old_name": f"{kineto_helper.FOLDER_PREFIX}q1w2e3",
        "other": f"something-{ns}-{dead}-abc",
    }
    for name in made.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "t0").write_bytes(b"[{}]")
    monkeypatch.setattr(kineto_helper, "_base", lambda: str(tmp_path))
    folder = kineto_helper._folder()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([*(v for k, v in made.items() if k != "gone"), os.path.basename(folder)])
    assert os.path.basename(folder).startswith(f"{kineto_helper.FOLDER_PREFIX}{ns}-{os.getpid()}-")
    # a second sweep finds nothing more to remove
    assert kineto_helper.sweep(str(tmp_path), ns) == []


def test_a_command_killed_with_its_helper_leaves_a_folder_the_next_one_removes(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto_helper, "_base", lambda: str(tmp_path))
    code = ("import os, sys, signal\n"
            "from traceview.parsers import kineto_helper, kineto_helper_serve\n"
            f"kineto_helper._base = lambda: {str(tmp_path)!r}\n"
            "h = kineto_helper.Helper(forked=True, serve=kineto_helper_serve._serve)\n"
            "h.conn.poll(30); h.conn.recv()\n"               # ready
            "os.killpg(0, signal.SIGKILL)\n")                # the command and its helper, at once
    p = subprocess.run([sys.executable, "-c", code], start_new_session=True, timeout=60)
    assert p.returncode == -9
    left = [q.name for q in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(kineto_helper.FOLDER_PREFIX)    # nothing could remove it
    kineto_helper._folder()
    now = [q.name for q in tmp_path.iterdir()]
    assert left[0] not in now and len(now) == 1
