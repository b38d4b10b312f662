"""engine/settings_lock.py: readers' queries hold the lock shared, beside each other; a change of the
database's settings holds it alone, after every shared holder and before shared holders that come
after it; a session's readers query while another reader's query goes on."""
import threading
import time

import pytest
from helpers import make_profile

from traceview.engine.session import Session
from traceview.engine.settings_lock import SettingsLock


def _thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_shared_holders_hold_it_together_and_keep_the_lock_alone_out():
    lock = SettingsLock()
    inside = threading.Event()
    go = threading.Event()

    def hold():
        with lock.shared():
            inside.set()
            go.wait(5)
    t = _thread(hold)
    assert inside.wait(5)
    with lock.shared():                            # a second shared holder does not wait for the first
        assert lock.locked()
        assert not lock.acquire(blocking=False)    # nor can the lock be held alone meanwhile
    go.set()
    t.join(5)
    assert not lock.locked()
    assert lock.acquire(blocking=False)            # every shared holder gone
    assert not lock.acquire(blocking=False)        # (not re-entrant)
    lock.release()
    with pytest.raises(RuntimeError, match="not held alone"):
        lock.release()


def test_a_holder_waiting_to_hold_it_alone_goes_before_later_shared_holders():
    lock = SettingsLock()
    order: list[str] = []
    first_in, first_go = threading.Event(), threading.Event()

    def first():
        with lock.shared():
            first_in.set()
            first_go.wait(5)
        order.append("first out")

    def alone():
        with lock:
            order.append("alone")

    def later():
        with lock.shared():
            order.append("later")
    a = _thread(first)
    assert first_in.wait(5)
    b = _thread(alone)
    time.sleep(0.1)                                # (b waits for the first shared holder)
    c = _thread(later)
    time.sleep(0.1)
    assert order == []                             # c waits behind b, although only a shared holder is in
    first_go.set()
    for t in (a, b, c):
        t.join(5)
    assert order == ["first out", "alone", "later"]


def test_a_readers_query_runs_while_another_readers_query_holds_the_lock():
    s = Session(make_profile(gpu=[dict(id=1, rank=0, start_ns=0, end_ns=10)]))
    r = s.reader()
    inside, go = threading.Event(), threading.Event()

    def other_query():
        with s.settings_lock.shared():             # as another reader's query holds it
            inside.set()
            go.wait(5)
    t = _thread(other_query)
    assert inside.wait(5)
    done: dict = {}
    q = _thread(lambda: done.setdefault("rows", r.rows("SELECT count(*) AS n FROM gpu_activities")))
    q.join(5)
    assert done.get("rows") == [{"n": 1}]          # not waited for the other query
    assert not s.settings_lock.acquire(blocking=False)   # a change of settings still waits for it
    go.set()
    t.join(5)
    r.close()
