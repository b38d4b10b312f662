"""A second process that decodes and routes some of a large Kineto trace's batches of events.

One trace is one stream of text, read (inflated) and cut into batches by the parser's process; the
decoding of a batch and the building of its columns are the work (`kineto.route_part`), and they
need no other batch. On a machine with a second core, this process decodes the batches handed to it
while the parser's process decodes the others; the parts come back (pickled Arrow arrays, flows,
counts) and are added in file order, so the tables are exactly those of a read in one process.

The helper is used only where it can win: at least two cores usable, a trace large enough to repay
starting an interpreter (`MIN_TEXT`, estimated from the file), and a parse in the main thread of a
main process (a pool worker of a many-rank run already has the other cores busy). Setting
`TRACEVIEW_PARSE_HELPER=0` turns it off, `=1` forces it (tests). Anything that goes wrong with the
helper (it cannot start, it dies) only costs speed: a batch it did not answer is decoded here. A
batch the helper's decode refuses comes back as that exception, raised here when the batch's turn
comes, so an error is the one a read in one process would give.
"""
from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path

ENV = "TRACEVIEW_PARSE_HELPER"
MIN_TEXT = 160 << 20  # JSON text (estimated) below which one process is faster: start-up ~0.5 s CPU
MAX_IN_FLIGHT = 4     # batches handed over and not yet answered (each ~TEXT_BYTES of text)


def _estimated_text(path: Path) -> int:
    """Bytes of JSON text: the file's size, or for gzip the larger of the last member's recorded
    size (modulo 4 GiB) and four times the compressed size."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return size
            fh.seek(max(0, size - 4))
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
        return 0
    return max(isize, 4 * size)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def wanted(path: Path) -> bool:
    choice = os.environ.get(ENV, "")
    if choice in ("0", "1"):
        return choice == "1"
    import multiprocessing as mp
    if mp.current_process().name != "MainProcess" or threading.current_thread() is not threading.main_thread():
        return False
    return _cores() >= 2 and _estimated_text(path) >= MIN_TEXT


def _serve(conn) -> None:
    """The helper's loop: a batch's text in, ("ok", part) or ("err", exception) out; b"" ends it.
    Threads read the texts and send the answers as they come, so neither process ever waits on
    the other's socket while it has a batch to decode."""
    import queue

    from . import kineto, kineto_stream
    texts: queue.SimpleQueue = queue.SimpleQueue()
    answers: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:
        while True:
            try:
                text = conn.recv_bytes()
            except (EOFError, OSError):
                text = b""
            texts.put(text)
            if not text:
                return

    def write() -> None:
        while True:
            out = answers.get()
            try:
                conn.send(out)
            except (EOFError, OSError):
                return
            except Exception as e:  # noqa: BLE001 - an exception that does not pickle: its text
                conn.send(("err", RuntimeError(f"{type(e).__name__}: {e}")))

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=write, daemon=True).start()
    answers.put(("ready", None))
    while True:
        text = texts.get()
        if not text:
            return
        try:
            evs = kineto_stream.decode_text(text)
            del text
            answers.put(("ok", kineto.route_part(evs)))
            del evs
        except Exception as e:  # noqa: BLE001 - sent back and raised in the parser's process
            answers.put(("err", e))


def _main(fd: int) -> None:
    from multiprocessing.connection import Connection
    _serve(Connection(fd))


_CHILD = ("import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
          "from traceview.parsers.kineto_helper import _main; _main(int(sys.argv[2]))")
_BROKEN = ("broken", None)


class Helper:
    """The helper process and the batches in flight (oldest first). A thread here sends the texts
    and another takes the answers as they come (the helper never waits to hand one back)."""

    def __init__(self):
        import json
        import queue
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection
        mine, theirs = socket.socketpair()
        try:  # a fresh interpreter (not a fork: nothing of this process's threads or memory is copied)
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, json.dumps([p for p in sys.path if p]), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        self.ready = threading.Event()
        self.broken = False
        self.sent: deque[bytes] = deque()  # texts handed over, kept until answered (redone here if not)
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._send_all, daemon=True),
                        threading.Thread(target=self._take_all, daemon=True)]
        for t in self.threads:
            t.start()

    def _send_all(self) -> None:
        while True:
            text = self.outbox.get()
            try:
                self.conn.send_bytes(text if text is not None else b"")
            except (OSError, ValueError):
                return  # the helper is gone: the receiving thread says so
            if text is None:
                return

    def _take_all(self) -> None:
        while True:
            try:
                got = self.conn.recv()
            except Exception:  # noqa: BLE001 - gone, or an answer that does not unpickle: decoded here
                self.inbox.put(_BROKEN)
                self.ready.set()
                return
            if got[0] == "ready":
                self.ready.set()
            else:
                self.inbox.put(got)

    def wants(self) -> bool:
        """Whether the next batch should be handed over (ready, and fewer than MAX_IN_FLIGHT out)."""
        return self.ready.is_set() and not self.broken and len(self.sent) < MAX_IN_FLIGHT

    def send(self, text: bytes) -> None:
        """Hand a batch over (kept, to be decoded here if the helper cannot answer)."""
        self.sent.append(text)
        self.outbox.put(text)

    def answered(self) -> bool:
        """Whether the oldest batch in flight can be taken without waiting."""
        return self.broken or not self.inbox.empty()

    def take(self, redo):
        """The answer for the oldest batch in flight: its part, or its exception raised; `redo(text)`
        decodes it here when the helper cannot answer."""
        text = self.sent.popleft()
        if not self.broken:
            kind, value = self.inbox.get()
            if kind == "ok":
                return value
            if kind == "err":
                raise value
            self.broken = True
        return redo(text)

    def close(self) -> None:
        self.outbox.put(None)  # the end: the helper exits, and its socket's end closes
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a helper that does not end is ended
            self.proc.kill()
            self.proc.wait()
        for t in self.threads:
            t.join(timeout=5)
        self.conn.close()
