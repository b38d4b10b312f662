"""The helper process's side of parsers/kineto_helper.py: it decodes and routes the batches of
events handed to it (`kineto.route_part`) and sends their parts back. A module of its own, so that
the parser (which starts the helper) and the helper's loop (which runs the parser's decoding) do not
import each other."""
from __future__ import annotations

import os

from .kineto_helper import _write_part as write_part


def _serve(conn, folder: str) -> None:
    """The helper's loop: a batch's slot and length in (its text the first `length` bytes of the
    slot's text file), ("ok", name of the pickled part's file) or ("err", exception) out; b""
    ends it. The texts and parts go through files in a
    memory-backed folder, each written and read in one call: a socket would pass them in pieces,
    each piece waiting for the other process's busy thread."""
    import pickle

    from . import kineto, kineto_stream
    try:
        conn.send(("ready", None))
    except (EOFError, OSError):  # the parser's process is gone already (it exited, not closing us)
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
        return
    while True:
        try:
            name = conn.recv_bytes()
        except (EOFError, OSError):  # the parser's process is gone (killed): its folder goes too
            import shutil
            shutil.rmtree(folder, ignore_errors=True)
            return
        if not name:
            return
        try:
            slot, size = name.decode().split()
            with open(os.path.join(folder, "t" + slot), "rb") as fh:
                text = fh.read(int(size))
            evs = kineto_stream.decode_text(text)
            del text
            bufs: list = []
            head = pickle.dumps(kineto.route_part(evs), protocol=5, buffer_callback=bufs.append)
            del evs
            out = "a" + slot
            sizes = write_part(os.path.join(folder, out), head, bufs)
            del bufs
            answer: tuple = ("ok", (out, len(head), sizes))
        except Exception as e:  # noqa: BLE001 - sent back and raised in the parser's process
            answer = ("err", e)
        try:
            conn.send(answer)
        except (EOFError, OSError):
            import shutil
            shutil.rmtree(folder, ignore_errors=True)
            return
        except Exception as e:  # noqa: BLE001 - an exception that does not pickle: its text
            conn.send(("err", RuntimeError(f"{type(e).__name__}: {e}")))


def main(fd: int, folder: str) -> None:
    """The helper process's entry (kineto_helper starts it with the pipe's descriptor and the folder)."""
    import gc
    from multiprocessing.connection import Connection

    from .no_dateutil import no_dateutil_search
    no_dateutil_search()
    from . import huge_pages
    huge_pages.turn_off()  # the helper reads only large traces (kineto_helper.MIN_TEXT)
    # this interpreter only decodes batches: the events are untracked structs, and what it keeps
    # (flow tuples, lists of fields) holds no cycles; the collector's passes over them are 2-5 % of
    # a parse (measured: overlap_x5 read 2.26-2.33 s CPU without, 2.35-2.56 s with)
    gc.disable()
    _serve(Connection(fd), folder)
