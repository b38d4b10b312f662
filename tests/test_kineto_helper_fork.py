"""The Kineto parser's helper forked by the command line before its DuckDB connection starts threads
(parsers/kineto_helper.prestart): the tables and the report are exactly those of one process, the
helper is forked only while no other thread runs, a helper no parse takes is closed, and the child
keeps none of the command's files open. Each case that forks runs in a fresh interpreter: this
test process may hold threads (DuckDB connections of other tests), which is exactly when no fork
may happen."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from helpers import TRACES, ops_and_kernels_trace

from traceview.parsers import kineto_helper, kineto_helper_serve

REAL = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"     # 22 MB of JSON: >= MIN_TEXT_FORKED

# (in the scripts below) hand batches over only once the helper is up
_READY_FIRST = """
wants = kineto_helper.Helper.wants
def ready_first(self):
    if not self.ready and not self.broken:
        self.conn.poll(60)
    return wants(self)
kineto_helper.Helper.wants = ready_first
"""

_PARSE = """
import json, os, sys, fcntl
from pathlib import Path
from traceview.parsers import kineto, kineto_helper, kineto_helper_serve, kineto_stream
os.environ.pop(kineto_helper.ENV, None)
kineto_helper._cores = lambda: 2                      # a busy test machine still forks the helper
kineto_helper._idle_core = lambda cores: True
kineto_stream.TEXT_BYTES = 1 << 20                    # many batches from a 22 MB text
path = Path(sys.argv[1])
lock = open(sys.argv[2], "w")                         # a lock this process holds as it forks
fcntl.flock(lock, fcntl.LOCK_EX)
sent = []
send = kineto_helper.Helper.send
kineto_helper.Helper.send = lambda self, text: (sent.append(len(text)), send(self, text))[1]
""" + _READY_FIRST + """started = kineto_helper.prestart(path, kineto_helper_serve._serve)
helper = kineto_helper._STARTED[1] if kineto_helper._STARTED else None
forked = type(helper.proc).__name__ if helper is not None else None
if helper is not None:
    helper.conn.poll(60)                              # the child is up (its files closed before it says so)
lock.close()                                          # let go: the child must not hold it
other = open(sys.argv[2], "w")
try:
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    free = True
except OSError:
    free = False
prof = kineto.read(path)
out = {"started": started, "forked": forked, "sent": len(sent), "left": kineto_helper._STARTED is not None,
       "lock_free": free}
os.environ[kineto_helper.ENV] = "0"
one = kineto.read(path)
out["same"] = all(getattr(prof, t).equals(getattr(one, t)) for t in
                  ("gpu_activities", "cpu_ranges", "launches", "syncs", "meta")) and prof.warnings == one.warnings
out["rows"] = prof.gpu_activities.num_rows
print(json.dumps(out))
"""


def _run(code: str, *args, timeout: int = 120, rc: int = 0) -> dict:
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == rc, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_forked_helper_gives_the_tables_of_one_process(tmp_path):
    got = _run(_PARSE, REAL, tmp_path / "lock")
    assert got["started"] and got["forked"] == "_Forked"       # a fork, not a fresh interpreter
    assert got["sent"] >= 4 and not got["left"]               # the parse took it and handed it batches
    assert got["same"]
    assert got["lock_free"]                                    # the child closed the inherited lock file
    # an independent count: the file's events of the routed kinds (a plain JSON decode)
    from traceview.parsers import bounded_read
    events = json.loads(bounded_read.read_bytes(REAL))["traceEvents"]
    assert got["rows"] == sum(1 for e in events if e.get("ph") == "X"
                              and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


_CLI = """
import json, os, sys
from traceview.parsers import kineto_helper
kineto_helper._cores = lambda: 2
kineto_helper._idle_core = lambda cores: True
took, made = [], []
take = kineto_helper.take
def taking(path):
    h = take(path)
    took.append(None if h is None else type(h.proc).__name__)
    return h
kineto_helper.take = taking
init = kineto_helper.Helper.__init__
def making(self, forked=False, text=0, serve=None):
    init(self, forked, text, serve)
    if forked:
        made.append(self.proc.pid)
kineto_helper.Helper.__init__ = making
sys.argv = ["traceview", "analyze", *sys.argv[1:]]
from traceview import launch
def done(code):
    gone = []
    for pid in made:
        try:
            gone.append(os.waitpid(pid, os.WNOHANG)[0] == pid)
        except ChildProcessError:
            gone.append(True)                        # waited for already (closed)
    print(json.dumps({"rc": code, "took": took, "left": kineto_helper._STARTED is not None, "forked": len(made),
                      "gone": all(gone)}))
    sys.stdout.flush()
    os._exit(code)
launch.exit_now = done
launch.main()
"""


def test_the_command_forks_the_helper_of_one_trace_and_reports_the_same(tmp_path):
    forked = _run(_CLI, REAL, "-f", "json", "-o", tmp_path / "a.json", "--no-store")
    assert forked == {"rc": 0, "took": ["_Forked"], "left": False, "forked": 1, "gone": True}
    p = subprocess.run([sys.executable, "-m", "traceview", "analyze", str(REAL), "-f", "json", "-o",
                        str(tmp_path / "b.json"), "--no-store"], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, kineto_helper.ENV: "0"})
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_no_helper_for_a_trace_the_store_holds(tmp_path):
    store = tmp_path / "store"
    first = _run(_CLI, REAL, "-f", "json", "-o", tmp_path / "a.json", "--store", store)
    assert first["took"] == ["_Forked"] and first["forked"] == 1 and not first["left"]
    # other options (another job in the store, analyzed again), the same trace (read from the store)
    again = _run(_CLI, REAL, "-f", "json", "-o", tmp_path / "b.json", "--store", store, "--top", "3")
    assert again == {"rc": 0, "took": [], "left": False, "forked": 0, "gone": True}


def test_a_prestarted_helper_no_parse_takes_is_closed(tmp_path):
    # an option refused after the fork (the patterns are checked by the DuckDB connection, made
    # after it): the helper is closed, and its process ended, before the command exits
    got = _run(_CLI, REAL, "-f", "json", "-o", tmp_path / "a.json", "--no-store", "--step-regex", "(", rc=2)
    assert got == {"rc": 2, "took": [], "left": False, "forked": 1, "gone": True}


def test_no_fork_while_another_thread_runs(monkeypatch):
    monkeypatch.delenv(kineto_helper.ENV, raising=False)
    monkeypatch.setattr(kineto_helper, "_cores", lambda: 2)
    monkeypatch.setattr(kineto_helper, "_idle_core", lambda cores: True)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="other")
    t.start()
    try:
        assert not kineto_helper.prestart(REAL, kineto_helper_serve._serve) and kineto_helper._STARTED is None
    finally:
        stop.set()
        t.join()


def test_take_gives_only_the_path_it_was_forked_for(tmp_path, monkeypatch):
    closed = []

    class Fake:
        def close(self):
            closed.append(self)

    a, b = Fake(), Fake()
    monkeypatch.setattr(kineto_helper, "_STARTED", (os.path.abspath(REAL), a))
    assert kineto_helper.take(REAL) is a and kineto_helper._STARTED is None and closed == []
    monkeypatch.setattr(kineto_helper, "_STARTED", (os.path.abspath(REAL), b))
    assert kineto_helper.take(tmp_path / "other.json") is None and closed == [b]
    monkeypatch.setattr(kineto_helper, "_STARTED", (os.path.abspath(REAL), a))
    kineto_helper.discard()
    assert closed == [b, a] and kineto_helper._STARTED is None


def test_small_traces_are_not_forked_for(tmp_path, monkeypatch):
    monkeypatch.delenv(kineto_helper.ENV, raising=False)
    monkeypatch.setattr(kineto_helper, "_cores", lambda: 2)
    monkeypatch.setattr(kineto_helper, "_idle_core", lambda cores: True)
    small = tmp_path / "t.json"
    small.write_text('{"traceEvents": []}')
    assert not kineto_helper.wanted(small, kineto_helper.MIN_TEXT_FORKED)
    assert kineto_helper.wanted(REAL, kineto_helper.MIN_TEXT_FORKED)       # 22 MB of text
    assert not kineto_helper.wanted(REAL)                                  # below the spawned helper's
    monkeypatch.setenv(kineto_helper.ENV, "0")
    assert not kineto_helper.prestart(REAL, kineto_helper_serve._serve)


_ORPHAN = """
import os, sys
from pathlib import Path
from traceview.parsers import kineto_helper, kineto_helper_serve
kineto_helper._cores = lambda: 2
kineto_helper._idle_core = lambda cores: True
assert kineto_helper.prestart(Path(sys.argv[1]), kineto_helper_serve._serve)
print(kineto_helper._STARTED[1].proc.pid, kineto_helper._STARTED[1].folder, flush=True)
os._exit(0)                                   # gone without closing it
"""


def test_the_forked_helper_ends_when_the_command_is_gone():
    p = subprocess.run([sys.executable, "-c", _ORPHAN, str(REAL)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    pid, folder = p.stdout.split()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":          # ended, not yet reaped by whoever adopted it
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the helper {pid} still runs after its command ended")
    assert not os.path.exists(folder)     # its folder of batches went with it


_STEAL = """
import json, os, sys, time
from pathlib import Path
from traceview.errors import TraceError
from traceview.parsers import kineto, kineto_helper, kineto_helper_serve, kineto_stream
os.environ.pop(kineto_helper.ENV, None)
kineto_helper._cores = lambda: 2
kineto_helper._idle_core = lambda cores: True
kineto_helper.MIN_TEXT_FORKED = 1
kineto_stream.TEXT_BYTES = int(sys.argv[2])
from traceview.parsers import bounded_read
bounded_read.CHUNK = int(sys.argv[2])                 # read in pieces of that size: a batch each
me = os.getpid()
route = kineto.route_part
def slow_in_the_helper(evs):                          # the helper (a child) is slow: batches stay in flight
    if os.getpid() != me:
        time.sleep(0.05)
    return route(evs)
kineto.route_part = slow_in_the_helper
""" + _READY_FIRST + """kept = []
close = kineto_helper.Helper.close
def closing(self, wait=True):
    kept.append((self.stolen, self.proc.pid))
    close(self, wait)
kineto_helper.Helper.close = closing
path = Path(sys.argv[1])
out = {}
def attempt():
    try:
        p = kineto.read(path)
        return {t: getattr(p, t).to_pydict() for t in ("gpu_activities", "cpu_ranges", "launches")}, p.warnings
    except TraceError as e:
        return None, str(e)
assert kineto_helper.prestart(path, kineto_helper_serve._serve)
two = attempt()
os.environ[kineto_helper.ENV] = "0"
one = attempt()
stolen, pid = kept[0]
from traceview import forking
forking.settle()                                      # (the reaping close() began on a thread, joined)
try:
    os.waitpid(pid, os.WNOHANG)
    reaped = False
except ChildProcessError:
    reaped = True                                     # waited for: no process left behind
print(json.dumps({"same": one == two, "stolen": stolen, "reaped": reaped, "error": one[0] is None,
                  "message": one[1] if one[0] is None else None}))
"""


def _trace(tmp_path, n: int, bad: dict | None = None):
    def edit(ev):
        for i, e in (bad or {}).items():
            ev[i] = e
    return ops_and_kernels_trace(tmp_path, n, edit)


def test_the_last_batches_taken_back_from_a_slow_helper_give_the_tables_of_one_process(tmp_path):
    f = _trace(tmp_path, 3000)
    got = _run(_STEAL, f, 16 << 10)
    assert got["same"] and not got["error"]
    assert got["stolen"] >= 1 and got["reaped"]      # batches were taken back; the helper was ended


def _bad_ts(ts: str) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": 1, "args": {"correlation": 1}}


@pytest.mark.parametrize("bad,msg", [
    # the last event's ts is text: a batch decoded here after it was taken back from the helper
    ({5999: _bad_ts("abc")}, "event fields of the wrong type.*abc"),
    # two bad events in the last batches, the later one in a batch taken back: the earlier is said, as in one
    # process (its message names its own value)
    ({5700: _bad_ts("early"), 5999: _bad_ts("late")}, "event fields of the wrong type.*early"),
    # an event that is not an object: the whole read's message, naming the first such index
    ({4000: 5, 5998: 5}, r"\$\.traceEvents\[4000\]"),
])
def test_a_batch_taken_back_that_fails_says_the_error_of_one_process(tmp_path, bad, msg):
    import re
    f = _trace(tmp_path, 3000, bad)
    got = _run(_STEAL, f, 16 << 10)
    assert got["same"] and got["error"] and re.search(msg, got["message"]), got


def test_waiting_for_a_helper_already_reaped_returns():
    import os
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)                                  # reaped by someone else first
    kineto_helper._Forked(pid).wait(timeout=1)
    kineto_helper._Forked(pid).wait()
    kineto_helper._Forked(pid).kill()                   # gone: nothing to kill


_PRIMED = """
import json, os, sys
from pathlib import Path
from traceview.parsers import kineto, kineto_helper, kineto_helper_serve, kineto_stream
os.environ.pop(kineto_helper.ENV, None)
kineto_helper._cores = lambda: 2
kineto_helper._idle_core = lambda cores: True
kineto_stream.TEXT_BYTES = 1 << 20                    # many batches from a 22 MB text
path = Path(sys.argv[1])
sent, routed = [], []
send = kineto_helper.Helper.send
kineto_helper.Helper.send = lambda self, text: (sent.append(len(text)), send(self, text))[1]
route = kineto.route_part
kineto.route_part = lambda evs: (routed.append(len(evs)), route(evs))[1]
started = kineto_helper.prestart(path, kineto_helper_serve._serve)
primed = kineto.prime(path)
helper = kineto_helper.started(path)
out = {"started": started, "primed": primed, "at_prime": len(sent), "routed_here": len(routed),
       "pending": helper.pending() if helper else None}
if sys.argv[2] in ("parse", "kill"):
    if sys.argv[2] == "kill":                         # the helper dies with the primed batches in flight
        import signal
        os.kill(helper.proc.pid, signal.SIGKILL)
        helper.proc.wait()
    prof = kineto.read(path)
    out["sent"] = len(sent)
    os.environ[kineto_helper.ENV] = "0"
    one = kineto.read(path)
    out["same"] = all(getattr(prof, t).equals(getattr(one, t)) for t in
                      ("gpu_activities", "cpu_ranges", "launches", "syncs", "meta")) and prof.warnings == one.warnings
else:                                                 # no parse takes it (an option refused)
    pid = helper.proc.pid if helper else None
    kineto_helper.discard()
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]
    out["trace_open"] = any(str(path.resolve()) in f for f in fds)
    try:
        os.waitpid(pid, os.WNOHANG)
        out["child_gone"] = not os.path.exists(f"/proc/{pid}")
    except ChildProcessError:                         # waited for by the close
        out["child_gone"] = True
print(json.dumps(out))
"""


def test_a_primed_parse_hands_its_first_batches_over_before_it_starts_and_reads_the_same():
    got = _run(_PRIMED, REAL, "parse")
    assert got["started"] and got["primed"]
    # four batches handed over by prime, none decoded here: the helper had them before the parse
    assert got["at_prime"] == kineto_helper.MAX_IN_FLIGHT == got["pending"] and got["routed_here"] == 0
    assert got["sent"] > got["at_prime"] and got["same"]


def test_a_primed_parse_whose_helper_dies_reads_the_same_here():
    got = _run(_PRIMED, REAL, "kill")
    assert got["primed"] and got["at_prime"] == kineto_helper.MAX_IN_FLIGHT
    assert got["same"]                                # the primed batches decoded here instead


def test_a_primed_parse_no_parse_takes_closes_its_file_and_its_helper():
    got = _run(_PRIMED, REAL, "discard")
    assert got["primed"] and got["at_prime"] == kineto_helper.MAX_IN_FLIGHT
    assert got["trace_open"] is False and got["child_gone"] is True


_NOT_A_TRACE = """
import json, os, sys
from pathlib import Path
from traceview.parsers import kineto, kineto_helper, kineto_helper_serve
os.environ.pop(kineto_helper.ENV, None)
kineto_helper._cores = lambda: 2
kineto_helper._idle_core = lambda cores: True
kineto_helper.MIN_TEXT_FORKED = 1 << 20
path = Path(sys.argv[1])
out = {"started": kineto_helper.prestart(path, kineto_helper_serve._serve), "primed": kineto.prime(path),
       "left": kineto_helper._STARTED is not None}
for label, helper in (("error", None), ("error_one", "0")):
    if helper is not None:
        os.environ[kineto_helper.ENV] = helper
    try:
        kineto.read(path)
    except Exception as e:
        out[label] = str(e)
print(json.dumps(out))
"""


def test_a_file_prime_cannot_split_is_parsed_as_without_it(tmp_path):
    # JSON that is not a Kineto trace (no traceEvents array): prime stops as the stream falls back,
    # closes the helper, and the parse says what one process says
    bad = tmp_path / "notrace.json"
    bad.write_text(json.dumps({"other": [{"x": "y" * 200} for _ in range(12_000)]}))
    got = _run(_NOT_A_TRACE, bad)
    assert got["started"] and got["primed"] is False and got["left"] is False
    assert got["error"] == got["error_one"] and "traceEvents" in got["error"]
