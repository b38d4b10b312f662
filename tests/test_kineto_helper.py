"""Batches of a large Kineto trace decoded by a helper process: the tables, warnings and errors must
be exactly those of a read in one process, and a helper that fails must only cost speed."""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import TRACES, ops_and_kernels_trace

from traceview import forking
from traceview.errors import TraceError
from traceview.parsers import bounded_read, kineto, kineto_helper, kineto_stream

TABLES = ("gpu_activities", "cpu_ranges", "launches", "syncs", "meta")
REAL = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"


def _sent(monkeypatch) -> list:
    """The batches handed to helpers, counted (and whether a helper had broken when closed)."""
    seen: list = []
    send, close = kineto_helper.Helper.send, kineto_helper.Helper.close

    def counting(self, text):
        seen.append(len(text))
        send(self, text)

    def closing(self, wait=True):
        seen.append("broken" if self.broken else "ok")
        close(self, wait)

    monkeypatch.setattr(kineto_helper.Helper, "send", counting)
    monkeypatch.setattr(kineto_helper.Helper, "close", closing)
    return seen


def _read(f, monkeypatch, helper: str):
    monkeypatch.setenv(kineto_helper.ENV, helper)
    return kineto.read(f)


def _wait_until_ready(monkeypatch):
    """Hand batches over only once the helper is up (else a small file is read before it is)."""
    wants = kineto_helper.Helper.wants

    def waiting(self):
        if not self.ready and not self.broken:
            self.conn.poll(60)
        return wants(self)

    monkeypatch.setattr(kineto_helper.Helper, "wants", waiting)


def _same(a, b) -> None:
    assert a.warnings == b.warnings
    for t in TABLES:
        got, want = getattr(a, t), getattr(b, t)
        assert got.equals(want), t


def test_helper_gives_the_tables_of_one_process_on_a_real_trace(monkeypatch):
    one = _read(REAL, monkeypatch, "0")
    monkeypatch.setattr(kineto_stream, "TEXT_BYTES", 256 << 10)  # many batches from a 22 MB text
    _wait_until_ready(monkeypatch)
    seen = _sent(monkeypatch)
    two = _read(REAL, monkeypatch, "1")
    _same(two, one)
    sent = [s for s in seen if isinstance(s, int)]
    assert len(sent) >= 10 and seen[-1] == "ok"  # the helper decoded many batches and never broke
    # an independent count: the file's events of the routed kinds (a plain JSON decode)
    events = json.loads(bounded_read.read_bytes(REAL))["traceEvents"]
    kernels = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert two.gpu_activities.num_rows == kernels


def _trace(tmp_path, n: int, bad_at: int | None = None, bad=None):
    return ops_and_kernels_trace(tmp_path, n, None if bad_at is None else lambda ev: ev.__setitem__(bad_at, bad))


@pytest.mark.parametrize("bad_at,bad,msg", [
    # a kernel late in the file whose ts is text: the parser's own message, as in one process
    (1601, {"ph": "X", "cat": "kernel", "name": "k", "ts": "abc", "dur": 1, "args": {"correlation": 1}},
     "event fields of the wrong type"),
    # an event that is not an object: the whole read's message, naming its index
    (1500, 5, r"\$\.traceEvents\[1500\]"),
    # not JSON (a NaN) in a batch whose brackets all close: handed over as it is, refused there
    (1201, {"ph": "X", "cat": "kernel", "name": "k", "ts": float("nan"), "dur": 1}, "not valid JSON"),
])
def test_a_batch_the_helper_refuses_gives_the_error_of_one_process(tmp_path, monkeypatch, bad_at, bad, msg):
    f = _trace(tmp_path, 1000, bad_at, bad)
    monkeypatch.setattr(kineto_stream, "TEXT_BYTES", 8 << 10)
    with pytest.raises(TraceError, match=msg) as one:
        _read(f, monkeypatch, "0")
    monkeypatch.setattr(kineto_helper, "MAX_IN_FLIGHT", 1 << 20)  # every batch to the helper
    _wait_until_ready(monkeypatch)
    seen = _sent(monkeypatch)
    with pytest.raises(TraceError, match=msg) as two:
        _read(f, monkeypatch, "1")
    assert str(two.value) == str(one.value)
    assert [s for s in seen if isinstance(s, int)]  # batches were handed over


def test_a_helper_that_dies_only_costs_speed(tmp_path, monkeypatch):
    """A helper that answers nothing and exits after its first batch: every batch handed to it is
    decoded here; the tables are those of one process."""
    f = _trace(tmp_path, 2000)
    monkeypatch.setattr(kineto_stream, "TEXT_BYTES", 8 << 10)
    one = _read(f, monkeypatch, "0")
    monkeypatch.setattr(kineto_helper, "_CHILD",
                        "import sys; from multiprocessing.connection import Connection; "
                        "c = Connection(int(sys.argv[2])); c.send(('ready', None)); c.recv_bytes()")
    _wait_until_ready(monkeypatch)
    seen = _sent(monkeypatch)
    two = _read(f, monkeypatch, "1")
    _same(two, one)
    assert [s for s in seen if isinstance(s, int)] and seen[-1] == "broken"
    assert two.gpu_activities.num_rows == 2000 and two.cpu_ranges.num_rows == 2000  # by construction


def test_a_helper_that_cannot_start_is_not_used(tmp_path, monkeypatch):
    f = _trace(tmp_path, 50)
    seen = _sent(monkeypatch)

    def refuse(*a, **k):
        raise OSError("no processes here")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    p = _read(f, monkeypatch, "1")
    assert p.gpu_activities.num_rows == 50 and seen == []


def test_when_the_helper_is_wanted(tmp_path, monkeypatch):
    small = _trace(tmp_path, 10)
    monkeypatch.delenv(kineto_helper.ENV, raising=False)
    monkeypatch.setattr(kineto_helper, "_START", None)   # no command start noted: the load average decides
    assert not kineto_helper.wanted(small)  # a small file: one process is faster
    monkeypatch.setattr(kineto_helper, "MIN_TEXT", 1)
    monkeypatch.setattr(kineto_helper, "_cores", lambda: 2)
    monkeypatch.setattr(kineto_helper.os, "getloadavg", lambda: (1.4, 0.0, 0.0))
    assert kineto_helper.wanted(small)
    monkeypatch.setattr(kineto_helper.os, "getloadavg", lambda: (1.6, 0.0, 0.0))
    assert not kineto_helper.wanted(small)  # no idle core: one process is as fast
    monkeypatch.setattr(kineto_helper.os, "getloadavg", lambda: (1.4, 0.0, 0.0))
    monkeypatch.setattr(kineto_helper, "_cores", lambda: 1)
    assert not kineto_helper.wanted(small)  # one core: nothing to gain
    monkeypatch.setattr(kineto_helper, "_cores", lambda: 2)
    got = []
    t = threading.Thread(target=lambda: got.append(kineto_helper.wanted(small)))
    t.start()
    t.join()
    assert got == [False]  # not the main thread (a server or a worker's thread)
    monkeypatch.setenv(kineto_helper.ENV, "0")
    assert not kineto_helper.wanted(small)
    # the gzip estimate: the trailer's size or four times the compressed size, whichever is larger
    import gzip
    gz = tmp_path / "t.json.gz"
    text = small.read_bytes()
    gz.write_bytes(gzip.compress(text))
    assert kineto_helper._estimated_text(gz) == max(len(text), 4 * gz.stat().st_size)
    assert kineto_helper._estimated_text(small) == len(text)


def test_the_cores_busy_since_the_start_decide_where_noted(monkeypatch):
    """With the command's start noted, the CPU time the machine spent since decides, not the load
    average (kept high for a minute after a run on every core): on 2 cores, 1 core busy (this
    process) leaves one idle, 2 do not; too short a span, or no /proc/stat, and the load average decides."""
    monkeypatch.setattr(kineto_helper, "_START", None)    # (put back after the test)
    monkeypatch.setattr(kineto_helper.os, "getloadavg", lambda: (1.9, 0.0, 0.0))   # a run just ended
    times = iter([(1000, 5000)])
    monkeypatch.setattr(kineto_helper, "_cpu_times", lambda: next(times))
    kineto_helper.note_start()
    for busy, want in ((50, True), (74, True), (76, False), (100, False)):   # of 100 ticks over 2 CPUs
        monkeypatch.setattr(kineto_helper, "_cpu_times", lambda b=busy: (1000 + b, 5100))
        assert kineto_helper._idle_core(2) is want, busy
    monkeypatch.setattr(kineto_helper, "_cpu_times", lambda: (1005, 5010))   # 10 ticks: too short a span
    assert kineto_helper._idle_core(2) is False                               # the load average (1.9)
    monkeypatch.setattr(kineto_helper, "_cpu_times", lambda: None)
    assert kineto_helper._idle_core(2) is False
    monkeypatch.setattr(kineto_helper.os, "getloadavg", lambda: (0.9, 0.0, 0.0))
    assert kineto_helper._idle_core(2) is True


def test_cpu_times_reads_proc_stat():
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat here")
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:9]]
    busy, total = kineto_helper._cpu_times()   # a moment later: each count only grew
    assert 0 < busy < total and total >= sum(fields)
    assert total - busy >= fields[3] + fields[4]   # idle and iowait are the rest


def _nested_trace(tmp_path, n: int, at: int, args) -> Path:
    return ops_and_kernels_trace(tmp_path, n, lambda ev: ev[at]["args"].__setitem__("nested", args))


@pytest.mark.parametrize("what", ["too deep", "objects side by side inside an event"])
def test_odd_batches_with_a_helper_read_as_in_one_process(tmp_path, monkeypatch, what):
    """Batches handed over unchecked (kineto_stream._batch_text), their decode there bounded: an
    event nested past MAX_DEPTH late in the file gives the whole read's error; `},{` between objects
    nested in an event (a cut falls inside it) makes the decoder there refuse the batch, and the
    file is read again with the batches checked before they are handed over (the cut taken again
    where the tokenizer says), streamed, the tables those of one process."""
    from traceview.parsers import json_depth
    deep: object = 1
    for _ in range(json_depth.MAX_DEPTH + 2):
        deep = [deep]
    args = deep if what == "too deep" else [{"a": i} for i in range(4000)]     # ~40 KB: cut inside
    f = _nested_trace(tmp_path, 1500, 2400, args)
    monkeypatch.setattr(kineto_stream, "TEXT_BYTES", 8 << 10)
    monkeypatch.setattr(bounded_read, "CHUNK", 8 << 10)       # pieces, and so batches, of 8 KB
    if what == "too deep":
        with pytest.raises(TraceError, match="nested more than") as one:
            _read(f, monkeypatch, "0")
    else:
        one = _read(f, monkeypatch, "0")
    monkeypatch.setattr(kineto_helper, "MAX_IN_FLIGHT", 1 << 20)  # every batch to the helper
    _wait_until_ready(monkeypatch)
    seen = _sent(monkeypatch)
    if what == "too deep":
        with pytest.raises(TraceError) as two:
            _read(f, monkeypatch, "1")
        assert str(two.value) == str(one.value)
    else:
        whole, streams = [], []
        ingest_whole, ingest_stream = kineto._ingest_whole, kineto._ingest_stream
        monkeypatch.setattr(kineto, "_ingest_whole", lambda p: (whole.append(p), ingest_whole(p))[1])

        def streaming(p, checked=False):
            try:
                got = ingest_stream(p, checked)
            except kineto_stream.Fallback as e:
                streams.append((checked, type(e).__name__))
                raise
            streams.append((checked, "read"))
            return got
        monkeypatch.setattr(kineto, "_ingest_stream", streaming)
        two = _read(f, monkeypatch, "1")
        _same(two, one)
        assert two.gpu_activities.num_rows == 1500 and two.cpu_ranges.num_rows == 1500   # by construction
        # refused where decoded, then read again checked: the cut found here and taken again, streamed on
        assert streams == [(False, "HandedRefused"), (True, "read")] and whole == []
    assert len([s for s in seen if isinstance(s, int)]) >= 5      # batches were handed over


def test_slot_files_are_reused_by_batches_of_other_lengths(tmp_path, monkeypatch):
    """The batches' texts and parts go through a few slot files, each written over from its start:
    a batch shorter than the one before it in the same slot must be read to its own length only
    (the rest of the file is the longer batch's tail), and a slot is written again only once its
    batch is answered. Names of very different lengths make the batches' texts differ in length;
    the tables are those of one process, and the slots number at most MAX_IN_FLIGHT."""
    def edit(ev):
        for k, e in enumerate(ev):
            if e["cat"] == "cpu_op":      # long names, then short ones, then long again
                e["name"] = f"op{k}_" + "x" * (400 if (k // 600) % 2 == 0 else 3)
    f = ops_and_kernels_trace(tmp_path, 3000, edit)
    one = _read(f, monkeypatch, "0")
    monkeypatch.setattr(kineto_stream, "TEXT_BYTES", 16 << 10)
    monkeypatch.setattr(bounded_read, "CHUNK", 16 << 10)   # (the text is read a piece at a time: small pieces)
    _wait_until_ready(monkeypatch)
    slots: list[int] = []
    close = kineto_helper.Helper.close

    def closing(self, wait=True):
        slots.append(self.slot_count)
        close(self, wait)
    seen = _sent(monkeypatch)
    monkeypatch.setattr(kineto_helper.Helper, "close", closing)
    two = _read(f, monkeypatch, "1")
    _same(two, one)
    sizes = [s for s in seen if isinstance(s, int)]
    assert len(sizes) >= 4 * kineto_helper.MAX_IN_FLIGHT and max(sizes) > 2 * min(sizes)
    assert slots and 1 <= slots[0] <= kineto_helper.MAX_IN_FLIGHT
    assert two.cpu_ranges.num_rows == 3000 and two.gpu_activities.num_rows == 3000


def _ends(monkeypatch, slow: float = 0.0) -> list:
    """Each helper's end: (wait, its folder, its process), and the reaping made `slow` seconds slower."""
    ended: list = []
    close, reap = kineto_helper.Helper.close, kineto_helper.Helper._reap

    def closing(self, wait=True):
        ended.append((wait, self.folder, self.proc))
        close(self, wait)

    def reaping(self):
        time.sleep(slow)
        reap(self)
    monkeypatch.setattr(kineto_helper.Helper, "close", closing)
    monkeypatch.setattr(kineto_helper.Helper, "_reap", reaping)
    return ended


def test_a_parse_ends_its_helper_on_a_thread_and_the_settle_leaves_nothing(tmp_path, monkeypatch):
    """At a parse's normal end the helper's exit is waited for, and its folder of batches removed, on
    a thread (forking.reap_later): the parse returns first. forking.settle (before a fork, at the
    exit) joins it: then neither the process nor the folder is left."""
    f = _trace(tmp_path, 2000)
    monkeypatch.setattr(kineto_stream, "TEXT_BYTES", 8 << 10)
    one = _read(f, monkeypatch, "0")
    _wait_until_ready(monkeypatch)
    ended = _ends(monkeypatch, slow=0.5)
    two = _read(f, monkeypatch, "1")
    [(wait, folder, proc)] = ended
    assert wait is False
    assert os.path.isdir(folder) and proc.returncode is None   # the read returned; the reaping still sleeps
    forking.settle()
    assert not os.path.exists(folder) and proc.returncode is not None
    _same(two, one)


def test_a_parse_that_fails_ends_its_helper_before_it_raises(tmp_path, monkeypatch):
    f = _trace(tmp_path, 1000, 1500, 5)      # an event that is not an object
    monkeypatch.setattr(kineto_stream, "TEXT_BYTES", 8 << 10)
    _wait_until_ready(monkeypatch)
    ended = _ends(monkeypatch, slow=0.2)
    reaped: list = []
    monkeypatch.setattr(forking, "reap_later", reaped.append)
    with pytest.raises(TraceError):
        _read(f, monkeypatch, "1")
    [(wait, folder, proc)] = ended
    assert wait is True and not reaped
    assert not os.path.exists(folder) and proc.returncode is not None
