"""Whether this process may fork now: fork copies only the calling thread, so a child forked while
another thread holds a lock (DuckDB's worker threads, a thread in a library) could wait on it
forever. The pool of a many-rank run (executors.start_pool) and the Kineto parser's helper
(parsers/kineto_helper.prestart) fork only while this test holds, else start a fresh interpreter."""
from __future__ import annotations

import os
from typing import Callable

_REAPERS: list = []   # the reapings `reap_later` began (later.Later), not yet waited for (settle)
_AT_EXIT: list = []   # [True] once `settle` is registered to run at the interpreter's exit


def fork_safe() -> bool:
    """Whether this process's only threads are its main one and jemalloc's background thread
    (jemalloc takes its locks around a fork): read from /proc (False where there is none). A
    child's reaping still under way (`reap_later`: a few ms) is waited for first."""
    settle()
    try:
        tasks = os.listdir("/proc/self/task")
        if len(tasks) == 1:
            return True
        main = str(os.getpid())
        for t in tasks:
            if t != main:
                with open(f"/proc/self/task/{t}/comm", encoding="utf-8") as f:
                    if f.read().strip() != "jemalloc_bg_thd":
                        return False
        return True
    except OSError:
        return False


def reap_later(reap: Callable[[], None]) -> None:
    """`reap` (a helper process's wait for its exit, and its folder's removal) on a thread of its
    own, so that the caller goes on while the child's memory is given back: the Kineto parse's
    helper took 5 ms to end after its last batch, each run, on the command's path. `settle` joins
    it: before a fork (`fork_safe`) and at the interpreter's exit (the command's `exit_now` runs the
    exit functions too), so no folder of batches outlives the process that made it."""
    import atexit

    from .later import Later
    if not _AT_EXIT:          # (once per process, however many parses it runs)
        atexit.register(settle)
        _AT_EXIT.append(True)
    _REAPERS.append(Later(reap, name="traceview-reap"))   # (a daemon thread; an error kept, not printed)


def settle() -> None:
    """Wait for every reaping `reap_later` started (each is done within milliseconds)."""
    while _REAPERS:
        _REAPERS.pop().wait()
