"""Whether this process may fork now: fork copies only the calling thread, so a child forked while
another thread holds a lock (DuckDB's worker threads, a thread in a library) could wait on it
forever. The pool of a many-rank run (executors.start_pool) and the Kineto parser's helper
(parsers/kineto_helper.prestart) fork only while this test holds, else start a fresh interpreter."""
from __future__ import annotations

import os


def fork_safe() -> bool:
    """Whether this process's only threads are its main one and jemalloc's background thread
    (jemalloc takes its locks around a fork): read from /proc (False where there is none)."""
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
