"""A second process that decodes and routes some of a large Kineto trace's batches of events.

One trace is one stream of text, read (inflated) and cut into batches by the parser's process; the
decoding of a batch and the building of its columns are the work (`kineto.route_part`), and they
need no other batch. On a machine with a second core, this process decodes the batches handed to it
while the parser's process decodes the others; the parts come back (pickled Arrow arrays, flows,
counts) and are added in file order, so the tables are exactly those of a read in one process.

The helper is used only where it can win: at least two cores usable and one of them idle (the
load average), a trace large enough to repay starting an interpreter (`MIN_TEXT`, estimated from
the file), and a parse in the main thread of a main process (a pool worker of a many-rank run
already has the other cores busy). The command line forks it instead (`prestart`), before its
DuckDB connection starts threads: a child of the command as it is then, with nothing to import and
no interpreter to start, which repays itself on a smaller trace (`MIN_TEXT_FORKED`) and is ready
when the parse starts. Setting
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
MIN_TEXT = 64 << 20  # JSON text (estimated) below which one process is as fast: start-up ~0.5 s CPU
MIN_TEXT_FORKED = 16 << 20   # the same for a forked helper (prestart): a fork costs a few ms
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


def wanted(path: Path, min_text: int | None = None) -> bool:
    choice = os.environ.get(ENV, "")
    if choice in ("0", "1"):
        return choice == "1"
    import multiprocessing as mp
    if mp.current_process().name != "MainProcess" or threading.current_thread() is not threading.main_thread():
        return False
    cores = _cores()
    return cores >= 2 and _idle_core(cores) and \
        _estimated_text(path) >= (MIN_TEXT if min_text is None else min_text)


_START: tuple[int, int] | None = None   # the machine's CPU times at the command's start (note_start)
MIN_TICKS = 20   # CPU ticks (over all CPUs) since the start below which they say too little


def _cpu_times() -> tuple[int, int] | None:
    """(busy, all) CPU time of the machine since it booted, in clock ticks summed over its CPUs
    (/proc/stat's first line: user nice system idle iowait irq softirq steal; iowait counts as
    idle); None where it cannot be read."""
    try:
        with open("/proc/stat", "rb") as fh:
            f = fh.readline().split()
        t = [int(x) for x in f[1:9]]
    except (OSError, ValueError):
        return None
    if not f or f[0] != b"cpu" or len(t) < 5:
        return None
    return sum(t) - t[3] - t[4], sum(t)


def note_start() -> None:
    """Remember the machine's CPU times now: the command's start (launch.main). `_idle_core` then
    sees how busy the cores were since, this process's start-up included, instead of the last
    minute's load average, which a run just finished on every core keeps high for a minute after."""
    global _START
    _START = _cpu_times()


def _idle_core(cores: int) -> bool:
    """Whether a core is free for the helper: since the command started (note_start), the machine
    kept fewer than `cores` - 0.5 cores busy, this process's own included; without that sample
    (a library call) or over too short a span, the last minute's load leaves one idle. On a busy
    machine two processes of one session get no more CPU than one (the scheduler shares it per
    session), and the helper's transfers are then a loss (measured: 44 s against 38 s at load 4-6)."""
    start = _START
    now = _cpu_times() if start is not None else None
    if start is not None and now is not None and now[1] - start[1] >= MIN_TICKS:
        return (now[0] - start[0]) / (now[1] - start[1]) * cores < cores - 0.5
    try:
        return os.getloadavg()[0] < cores - 0.5  # the bench's own runs keep it near 1 on a quiet machine
    except OSError:  # no load average here
        return True


def _over(path: str):
    """The slot file `path` opened to be written over from its start, not emptied first: the
    file's pages, kept from an earlier batch, are written again, not made anew (a new page of the
    memory-backed folder costs as much as copying a few into it)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb")


def _write_part(path: str, head: bytes, bufs: list) -> list[int]:
    """A pickled part: its head, then each out-of-band buffer (the Arrow arrays' data), in order,
    written over the slot file `path` (`_over`)."""
    sizes = []
    with _over(path) as fh:
        fh.write(head)
        for b in bufs:
            raw = b.raw()
            sizes.append(raw.nbytes)
            fh.write(raw)
    return sizes


def _read_part(path: str, head_len: int, sizes: list[int]):
    """The part written by `_write_part`, its arrays' buffers read into Arrow's memory pool (as the
    columns built here are: the pool's pages are handed back after the parse)."""
    import pickle

    import pyarrow as pa
    with open(path, "rb") as fh:
        head = fh.read(head_len)
        bufs = []
        for n in sizes:
            buf = pa.allocate_buffer(n)
            if n and fh.readinto(memoryview(buf)) != n:
                raise OSError(f"{path}: short read")
            bufs.append(buf)
    return pickle.loads(head, buffers=bufs)


def _write(path: str, data: bytes) -> None:
    """`data` written over the slot file `path` (`_over`)."""
    with _over(path) as fh:
        fh.write(data)


_CHILD = ("import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
          "from traceview.parsers.kineto_helper_serve import main; main(int(sys.argv[2]), sys.argv[3])")
_BROKEN = ("broken", None)


FOLDER_PREFIX = "traceview-parse-"


def _base() -> str:
    """Where the helpers' folders go: memory (/dev/shm) where it can be written, else the temp folder."""
    import tempfile
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def _namespace() -> str:
    """This process's PID namespace (a pid names a process only within it)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _folder() -> str:
    """A new private folder for one helper's batches, named by this process's PID namespace and
    pid; the folders of commands that are gone (killed together with their helper, as a job's
    cancel or the OOM killer does: neither could remove it) are removed first."""
    import tempfile
    base, ns = _base(), _namespace()
    sweep(base, ns)
    return tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{ns}-{os.getpid()}-", dir=base)


def sweep(base: str, ns: str) -> list[str]:
    """Remove the helpers' folders in `base` of namespace `ns` whose command no longer exists;
    returns their names. A folder of another namespace, of a live process or of a process this
    one may not signal (another user's) is left alone."""
    import shutil
    gone: list[str] = []
    pre = f"{FOLDER_PREFIX}{ns}-"
    try:
        names = os.listdir(base)
    except OSError:
        return gone
    for name in names:
        pid = name[len(pre):].split("-", 1)[0] if name.startswith(pre) else ""
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            gone.append(name)
        except OSError:
            pass
    return gone


class _Forked:
    """The forked helper's process, waited for and killed as a subprocess.Popen is."""

    def __init__(self, pid: int):
        self.pid = pid

    def wait(self, timeout: float | None = None) -> None:
        import time
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                pid, _ = os.waitpid(self.pid, 0 if end is None else os.WNOHANG)
            except ChildProcessError:  # waited for already (or by a handler that reaps every child)
                return
            if pid:
                return
            if time.monotonic() > end:  # type: ignore[operator]
                raise TimeoutError(f"helper {self.pid} did not end")
            time.sleep(0.002)

    def kill(self) -> None:
        import signal
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _forked_child(sock, folder: str, text: int, serve) -> None:
    """The forked helper: it serves batches and exits (os._exit: nothing of the command it was
    forked from runs here, neither its exit handlers nor its buffered output); it keeps no file of
    the command open but the standard ones and its socket (a lock the command lets go of is let
    go). It ends when the command closes its end or exits."""
    code = 1
    try:
        import gc
        import signal
        gc.disable()   # as the spawned helper (kineto_helper_serve.main)
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the command's: it ends the helper
        fd = sock.detach()
        os.closerange(3, fd)
        os.closerange(fd + 1, max(fd + 1, os.sysconf("SC_OPEN_MAX")))
        from . import huge_pages
        if text >= huge_pages.MIN_TEXT:   # as the command's parse does for such a trace (kineto.read)
            huge_pages.turn_off()
        from multiprocessing.connection import Connection
        serve(Connection(fd), folder)
        code = 0
    except BaseException:  # noqa: BLE001 - the command decodes what was not answered
        pass
    finally:
        os._exit(code)


class Helper:
    """The helper process and the batches in flight (oldest first): their texts are files in a
    private memory-backed folder, and so are the answers; the socket carries only slot numbers and
    lengths. A batch's text goes to slot file t<slot> and its part comes back in a<slot>, each
    written over from its start; the slot is another batch's once this one's answer is taken (the
    helper has read its text, this process its part), and never again where its batch was stolen.
    So a parse writes into at most MAX_IN_FLIGHT files whose pages it keeps: a new page of the
    folder cost as much as copying a few (the x5 trace's 50 MB of texts: 0.97 of the wall).
    `forked`: a child of this process running `serve` (prestart: only where forking is safe), else
    a fresh interpreter."""

    def __init__(self, forked: bool = False, text: int = 0, serve=None):
        import json
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection
        self.folder = _folder()
        mine, theirs = socket.socketpair()
        try:
            if forked:
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    mine.close()
                    _forked_child(theirs, self.folder, text, serve)
                self.proc: subprocess.Popen | _Forked = _Forked(pid)
            else:  # a fresh interpreter (nothing of this process's threads or memory is copied)
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", _CHILD, json.dumps([p for p in sys.path if p]), str(theirs.fileno()),
                     self.folder], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except BaseException:
            mine.close()
            self._remove_folder()
            raise
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        self.ready = False
        self.broken = False
        # (text, slot) of the batches handed over, kept until answered (redone here if not)
        self.sent: deque[tuple[bytes, int]] = deque()
        self.free: list[int] = []          # slot files no batch in flight uses (reused: their pages kept)
        self.slot_count = 0
        self.stolen = 0   # the newest batches handed over, then decoded here instead (steal)
        # a parse begun by kineto.prime: (its stream, the stream's iterator, the parts waiting), for
        # the parse to go on with; closed with the helper where no parse takes it
        self.begun: tuple | None = None

    def _remove_folder(self) -> None:
        import shutil
        shutil.rmtree(self.folder, ignore_errors=True)

    def _recv(self):
        try:
            return self.conn.recv()
        except Exception:  # noqa: BLE001 - gone, or an answer that does not unpickle: decoded here
            self.broken = True
            return _BROKEN

    def wants(self) -> bool:
        """Whether the next batch should be handed over (ready, and fewer than MAX_IN_FLIGHT out)."""
        return self.up(0) and len(self.sent) < MAX_IN_FLIGHT

    def up(self, timeout: float) -> bool:
        """Whether the helper has said it is ready, within `timeout` seconds (waited for) where it
        has not yet, and is not broken."""
        if not self.ready and not self.broken:
            try:
                if self.conn.poll(timeout):
                    self.ready = self._recv()[0] == "ready"
                    self.broken = not self.ready
            except (EOFError, OSError):
                self.broken = True
        return self.ready and not self.broken

    def send(self, text: bytes) -> None:
        """Hand a batch over (kept, to be decoded here if the helper cannot answer)."""
        if self.free:
            slot = self.free.pop()
        else:
            slot = self.slot_count
            self.slot_count += 1
        self.sent.append((text, slot))
        if self.broken:
            return
        try:
            _write(os.path.join(self.folder, f"t{slot}"), text)
            self.conn.send_bytes(f"{slot} {len(text)}".encode())
        except (OSError, ValueError):
            self.broken = True

    def pending(self) -> int:
        """Batches handed over and not yet taken (nor stolen)."""
        return len(self.sent)

    def steal(self) -> bytes:
        """The text of the newest batch handed over and not yet taken, to be decoded by the caller
        instead: its answer will not be read (the helper is ended without it, see close)."""
        self.stolen += 1
        return self.sent.pop()[0]      # (its slot stays the helper's: never written again)

    def answered(self) -> bool:
        """Whether the oldest batch in flight can be taken without waiting."""
        if self.broken:
            return True
        try:
            return self.conn.poll()
        except (EOFError, OSError):
            self.broken = True
            return True

    def take(self, redo):
        """The answer for the oldest batch in flight: its part, or its exception raised; `redo(text)`
        decodes it here when the helper cannot answer."""
        text, slot = self.sent.popleft()
        if not self.broken:
            kind, value = self._recv()
            self.free.append(slot)   # answered: the helper is done with its text (its part read below)
            if kind == "ok":
                name, head_len, sizes = value
                try:
                    return _read_part(os.path.join(self.folder, name), head_len, sizes)
                except Exception:  # noqa: BLE001 - an answer that cannot be read: decoded here
                    self.broken = True
            elif kind == "err":
                raise value
            self.broken = True
        return redo(text)

    def close(self, wait: bool = True) -> None:
        """End the helper: its process waited for and its folder removed, here or (`wait` False:
        the parse's normal end) on a thread of its own (traceview.forking.reap_later)."""
        if self.begun is not None:      # a parse begun (prime) that no parse took: its file closed
            self.begun[1].close()
            self.begun = None
        if self.stolen and not self.broken:
            self.proc.kill()  # it may still be decoding a batch taken back from it: not waited for
        else:
            try:
                if not self.broken:
                    self.conn.send_bytes(b"")  # the end: the helper exits
            except (OSError, ValueError):
                pass
        if wait:
            self._reap()
        else:
            from traceview.forking import reap_later
            reap_later(self._reap)

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a helper that does not end is ended
            self.proc.kill()
            self.proc.wait()
        try:
            self.conn.close()
        finally:
            self._remove_folder()


# -- a helper forked before the parse (the command line) ---------------------------------------

_STARTED: tuple[str, Helper] | None = None   # (the trace's path, its helper), until the parse takes it


def fork_wanted(path: Path) -> bool:
    """Whether `prestart` would fork for `path`: a trace of MIN_TEXT_FORKED or more, where forking
    is safe (no thread but the main one: before the run's DuckDB connection)."""
    from traceview.forking import fork_safe
    return os.environ.get(ENV) != "0" and hasattr(os, "fork") and wanted(path, MIN_TEXT_FORKED) \
        and fork_safe()


def prestart(path: Path, serve) -> bool:
    """Fork the helper of `path`'s parse now, where it is wanted (`fork_wanted`); the child runs
    `serve` (kineto_helper_serve._serve: passed in, so that this module imports neither the loop
    nor the parser it runs; the caller imports the parser before, once for both processes).
    `take` gives the helper to the parse. True when one was started."""
    global _STARTED
    discard()
    if not fork_wanted(path):
        return False
    try:
        helper = Helper(forked=True, text=_estimated_text(path), serve=serve)
    except OSError:  # no process can be made here: the parse goes on as without
        return False
    _STARTED = (os.path.abspath(path), helper)
    return True


def started(path: Path) -> Helper | None:
    """The helper prestart forked for `path`, left for the parse to take; None where there is none."""
    got = _STARTED
    return got[1] if got is not None and got[0] == os.path.abspath(path) else None


def take(path: Path) -> Helper | None:
    """The helper prestart forked for `path`, or None (another path's is closed)."""
    global _STARTED
    got, _STARTED = _STARTED, None
    if got is None:
        return None
    if got[0] != os.path.abspath(path):
        got[1].close()
        return None
    return got[1]


def discard() -> None:
    """Close a prestarted helper no parse took (the trace came from the store, or an error came first)."""
    global _STARTED
    got, _STARTED = _STARTED, None
    if got is not None:
        got[1].close()
