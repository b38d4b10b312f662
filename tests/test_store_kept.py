"""What the store keeps of a whole job (traceview/job_cache.py, the document part of store.py): a
second `analyze` of the same job with the same options copies the kept report out without
analyzing or reading the document; another format renders the kept document; a damaged kept file
is never served; nothing is kept for a run that skipped ranks; the document comes back exactly."""
import hashlib
import json
import math
import os
import shutil
import time
import zlib
from pathlib import Path

import pytest
from helpers import TRACES

from traceview import executors, runs, store as store_mod
from traceview.cli import run_cli

DLRM = TRACES / "kineto" / "dlrm_8rank_v100"


@pytest.fixture
def job(tmp_path):
    """Two ranks of the DLRM job, copied (the tests touch and rewrite them)."""
    d = tmp_path / "job"
    d.mkdir()
    for f in sorted(DLRM.iterdir())[:2]:
        shutil.copy(f, d / f.name)
    return d


def analyze(tmp_path, *args, fmt="json", code=0) -> bytes:
    out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}.{fmt}"
    assert run_cli(["analyze", *map(str, args), "-f", fmt, "-o", str(out), "--jobs", "1"]) == code
    return out.read_bytes()


class Counted:
    """runs.run_analyze, counting its calls (each is a whole analysis)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = runs.run_analyze

        def counted(*a, **k):
            self.calls += 1
            return real(*a, **k)
        monkeypatch.setattr(runs, "run_analyze", counted)


def no_document_read(monkeypatch):
    def refuse(self, key):
        raise AssertionError("the kept document was read")
    monkeypatch.setattr(store_mod.Store, "get_document", refuse)


@pytest.mark.parametrize("fmt", ["json", "text", "markdown"])
def test_second_analyze_copies_the_kept_report_out(tmp_path, job, monkeypatch, fmt):
    root = tmp_path / "store"
    plain = analyze(tmp_path, job, "--no-store", fmt=fmt)
    counted = Counted(monkeypatch)
    first = analyze(tmp_path, job, "--store", root, fmt=fmt)
    assert counted.calls == 1
    kept = sorted(p.name.split(".", 1)[1] for p in (root / "jobs").iterdir())
    # (a JSON report written to a file on the store's filesystem is kept by a link of that file)
    assert kept == sorted(["document.kept", f"{fmt}.kept"] + (["json.payload"] if fmt == "json" else []))
    with monkeypatch.context() as m:
        no_document_read(m)
        second = analyze(tmp_path, job, "--store", root, fmt=fmt)
    assert counted.calls == 1 and first == second == plain
    assert store_mod.Store(root).check() == []


def test_another_format_renders_the_kept_document(tmp_path, job, monkeypatch):
    root = tmp_path / "store"
    analyze(tmp_path, job, "--store", root, fmt="json")
    counted = Counted(monkeypatch)
    for fmt in ("html", "markdown", "text"):
        assert analyze(tmp_path, job, "--store", root, fmt=fmt) == analyze(tmp_path, job, "--no-store", fmt=fmt)
    assert counted.calls == 3           # the three --no-store runs only
    assert not list((root / "jobs").glob("*.html.kept"))    # HTML follows the chart library: not kept


@pytest.mark.parametrize("damage", ["truncate", "flip", "header", "longer", "empty"])
def test_a_damaged_kept_report_is_never_served(tmp_path, job, monkeypatch, damage):
    monkeypatch.setattr(store_mod.Store, "can_link", lambda self, folder: False)   # kept as a copy (a header, then it)
    root = tmp_path / "store"
    plain = analyze(tmp_path, job, "--no-store")
    analyze(tmp_path, job, "--store", root)
    (kept,) = (root / "jobs").glob("*.json.kept")
    data = kept.read_bytes()
    head, _, payload = data.partition(b"\n")
    bad = {"truncate": data[: len(data) - 100], "flip": head + b"\n" + payload[:500] + b"X" + payload[501:],
           "header": data.replace(store_mod.KEPT_FORMAT.encode(), b"traceview.kept/9", 1), "longer": data + b" ",
           "empty": b""}[damage]
    assert bad != data
    kept.write_bytes(bad)
    assert store_mod.Store(root).check() != []
    counted = Counted(monkeypatch)
    assert analyze(tmp_path, job, "--store", root) == plain
    assert counted.calls == 0           # rendered from the kept document, and kept again
    assert store_mod.Store(root).check() == [] and kept.read_bytes() == data


def test_a_damaged_kept_document_means_analyzing_again(tmp_path, job, monkeypatch):
    root = tmp_path / "store"
    plain = analyze(tmp_path, job, "--no-store", fmt="text")
    analyze(tmp_path, job, "--store", root)
    (doc,) = (root / "jobs").glob("*.document.kept")
    b = bytearray(doc.read_bytes())
    b[-10] ^= 0xFF
    doc.write_bytes(bytes(b))
    counted = Counted(monkeypatch)
    assert analyze(tmp_path, job, "--store", root, fmt="text") == plain
    assert counted.calls == 1 and store_mod.Store(root).check() == []


def test_budget_exit_code_kept_with_the_report(tmp_path, job, monkeypatch):
    root = tmp_path / "store"
    budget = tmp_path / "budget.toml"
    budget.write_text("max_idle_pct = 0\n")
    plain = analyze(tmp_path, job, "--no-store", "--budget", budget, code=1)
    counted = Counted(monkeypatch)
    assert analyze(tmp_path, job, "--store", root, "--budget", budget, code=1) == plain
    with monkeypatch.context() as m:
        no_document_read(m)
        assert analyze(tmp_path, job, "--store", root, "--budget", budget, code=1) == plain
    budget.write_text("max_idle_pct = 100\n")      # a file the options name: part of the key
    assert analyze(tmp_path, job, "--store", root, "--budget", budget, code=0) != plain
    assert counted.calls == 2


def test_touched_trace_is_served_changed_trace_is_not(tmp_path, job, monkeypatch):
    root = tmp_path / "store"
    first = analyze(tmp_path, job, "--store", root)
    victim = sorted(job.iterdir())[0]
    st = victim.stat()
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))     # touched: same bytes
    counted = Counted(monkeypatch)
    assert analyze(tmp_path, job, "--store", root) == first and counted.calls == 0
    victim.write_bytes(sorted(DLRM.iterdir())[2].read_bytes())         # another rank's trace under this name
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10 ** 9))
    assert analyze(tmp_path, job, "--store", root) != first and counted.calls == 1


def test_size_or_mtime_unchanged_is_trusted_without_hashing(tmp_path, job, monkeypatch):
    root = tmp_path / "store"
    analyze(tmp_path, job, "--store", root)
    hashed = []
    real = store_mod.file_hash
    monkeypatch.setattr(store_mod, "file_hash", lambda p: hashed.append(p) or real(p))
    no_document_read(monkeypatch)
    analyze(tmp_path, job, "--store", root)
    assert hashed == []         # neither the traces nor any Parquet file is read or hashed


def test_nothing_kept_when_ranks_were_skipped(tmp_path, job):
    root = tmp_path / "store"
    (job / "rank9.json").write_text("{not json")
    assert run_cli(["analyze", str(job), "-f", "json", "-o", str(tmp_path / "a.json"), "--store", str(root),
                    "--skip-bad-ranks", "--jobs", "1"]) == 0
    assert not (root / "jobs").exists() or not list((root / "jobs").iterdir())


def test_kept_document_comes_back_exactly(tmp_path):
    s = store_mod.Store(tmp_path / "s")
    doc = {"z": 1, "a": [1.5, math.nan, -0.0, 1e-05, 2 ** 63], "m": {"é😀": None, "b": True}, 3: "int key",
           "nested": [[{"x": []}]]}
    assert s.put_document("k", doc)
    back = s.get_document("k")
    assert list(back) == list(doc) and list(back["m"]) == list(doc["m"])        # dict order kept
    assert back["a"][0] == 1.5 and math.isnan(back["a"][1]) and math.copysign(1, back["a"][2]) == -1
    assert back[3] == "int key" and back["nested"] == doc["nested"] and type(back["a"][4]) is int
    assert s.get_document("other") is None
    # what would not come back exactly is not kept
    assert not s.put_document("t", {"a": (1, 2)}) and s.get_document("t") is None
    assert not s.put_document("b", {"a": 2 ** 70}) and not s.put_document("c", {"a": {1, 2}})

    class Name(str):
        pass
    assert not s.put_document("d", {"a": Name("x")})
    assert s.check() == []


def test_the_kept_document_is_msgpack_in_compressed_frames(tmp_path, monkeypatch):
    """put_document writes the msgpack in zstd frames (store.FRAMES, named by the header's info);
    each frame its two sizes then the compressed bytes, the frames' bytes together the msgpack of
    the document; a frame that does not add up, or another codec, reads as absent; a document kept
    as plain msgpack (no codec) still reads."""
    import msgspec
    import pyarrow as pa
    monkeypatch.setattr(store_mod, "FRAME_BYTES", 1000)          # many frames, pieces across them
    s = store_mod.Store(tmp_path / "s")
    doc = {f"row{r}": {"rank": r, "cause": "peer_wait", "dur_ns": 150_000 + r} for r in range(500)}   # 1,000 pieces
    assert s.put_document("k", doc) and s.get_document("k") == doc
    payload, info = s.get_kept("k", "document")
    assert info["codec"] == store_mod.FRAMES
    frames, at, codec = [], 0, pa.Codec("zstd")
    while at < len(payload):
        packed, size = int.from_bytes(payload[at:at + 8], "little"), int.from_bytes(payload[at + 8:at + 16], "little")
        frames.append(codec.decompress(payload[at + 16:at + 16 + packed], decompressed_size=size, asbytes=True))
        at += 16 + packed
    assert at == len(payload) and len(frames) > 10
    assert all(len(f) < 1000 + 2000 for f in frames)              # about FRAME_BYTES each (a piece may cross)
    assert b"".join(frames) == msgspec.msgpack.encode(doc)
    assert len(payload) < len(b"".join(frames)) / 3               # repeated keys compress
    # frames that do not add up (the CRC-32 as written, so only the frames can say), another codec
    assert s.put_kept_pieces("cut", "document", [payload[:-5]], {"codec": store_mod.FRAMES})
    assert s.get_document("cut") is None
    assert s.put_kept_pieces("other", "document", [payload], {"codec": "lz4-frames/9"})
    assert s.get_document("other") is None
    # plain msgpack, as kept before the frames
    assert s.put_kept("plain", "document", msgspec.msgpack.encode(doc))
    assert s.get_document("plain") == doc
    assert s.check() == []


def test_kept_file_replaced_whole(tmp_path):
    s = store_mod.Store(tmp_path / "s")
    assert s.put_kept("k", "json", b"one", {"budget_violated": False})
    assert s.put_kept("k", "json", b"two two", {"budget_violated": True})
    assert s.get_kept("k", "json") == (b"two two", {"budget_violated": True})
    assert s.get_kept("k", "text") is None and s.get_kept("j", "json") is None
    assert [p.name for p in (tmp_path / "s" / "jobs").iterdir()] == ["k.json.kept"]


def test_job_says_where_it_came_from(tmp_path, job):
    from traceview.document.options import AnalyzeOptions
    from traceview.job_cache import open_job
    root = tmp_path / "store"
    with executors.configured(executors.RunSettings(store=root, jobs=1)):
        first = open_job([str(job)], {}, lambda p: runs.run_analyze(p, AnalyzeOptions()), "json")
        assert not first.from_store
        want = first.render("json")
    for fmt, report_kept in (("json", True), ("html", False)):
        with executors.configured(executors.RunSettings(store=root, jobs=1)) as state:
            j = open_job([str(job)], {}, lambda p: pytest.fail("analyzed"), fmt)
        assert j.from_store and state.stats["document_from_store"]
        assert state.stats.get("report_from_store", False) is report_kept
    assert j.render("json") == want


def test_job_without_a_store_analyzes(tmp_path):
    from traceview.job_cache import open_job
    calls = []
    with executors.configured(executors.RunSettings(store=None, jobs=1)):
        j = open_job([str(DLRM)], {}, lambda p: calls.append(p) or {"budget": {"violations": [1]}}, "json")
    assert calls == [[str(DLRM)]] and j.budget_violated and not j.from_store


def test_a_large_report_is_kept_on_a_thread_piece_by_piece(tmp_path, monkeypatch):
    """Past TEE_THREAD_BYTES the kept copy is written on a thread while the caller writes each piece;
    the next piece is made only once the thread is done with the one before: pieces that are views
    of one buffer the maker overwrites (as the JSON writer's memory-mapped bodies are let go) must
    be kept as they were given, and a slow kept write must not let the caller run ahead."""
    import hashlib
    import threading

    from traceview import job_cache
    monkeypatch.setattr(job_cache, "TEE_THREAD_BYTES", 10)
    s = store_mod.Store(tmp_path / "s")
    want = [bytes([65 + i]) * (7 + i) for i in range(12)]      # pieces of different lengths and bytes
    buf = bytearray(64)

    def made():
        for piece in want:
            buf[:len(piece)] = piece
            yield memoryview(buf)[:len(piece)]
            buf[:] = b"\0" * len(buf)                          # the maker lets the piece go

    writer = s.kept_writer("k", "json")
    write, threads = writer.write, set()

    def slow(piece):
        threads.add(threading.current_thread().name)
        time.sleep(0.005)
        write(piece)
    writer.write = slow
    kept = []
    out = b"".join(bytes(p) for p in job_cache._teed(made(), writer, lambda: kept.append(1)))
    assert out == b"".join(want) and kept == [1]
    payload, _ = s.get_kept("k", "json")
    assert payload == b"".join(want)
    assert hashlib.sha256(payload).hexdigest() == hashlib.sha256(b"".join(want)).hexdigest()
    assert any(n.startswith("traceview-kept") for n in threads)    # the large part went to the thread
    assert threading.current_thread().name in threads             # the first 10 bytes were written here
    # a caller that stops part way keeps nothing and leaves no file behind
    writer = s.kept_writer("j", "json")
    pieces = job_cache._teed(made(), writer, lambda: kept.append(2))
    for _ in range(5):
        next(pieces)
    pieces.close()
    assert s.get_kept("j", "json") is None and kept == [1]
    assert sorted(p.name for p in (tmp_path / "s" / "jobs").iterdir()) == ["k.json.kept"]


def test_open_kept_checks_once_and_reads_in_pieces_what_was_checked(tmp_path, monkeypatch):
    """Store.open_kept (the replay's read): the payload get_kept gives, in pieces, never whole; a
    damaged file is refused; a kept file replaced after it was opened still gives what was checked."""
    st = store_mod.Store(tmp_path / "store")
    payload = bytes(range(256)) * 1000 + b"tail"          # 256,004 bytes
    assert st.put_kept("k1", "json", payload, {"rc": 3})
    monkeypatch.setattr(store_mod.KeptPayload, "PIECE", 4099)
    got = st.open_kept("k1", "json")
    assert got is not None and got.info == {"rc": 3} and got.size == len(payload)
    pieces = list(got)
    assert b"".join(pieces) == payload and max(map(len, pieces)) == 4099 and len(pieces) == -(-len(payload) // 4099)
    assert b"".join(got) == payload                         # again, from the start
    # replaced (as the store replaces: a rename) while open: the open file gives what was checked
    assert st.put_kept("k1", "json", b"other", {"rc": 0})
    assert b"".join(got) == payload
    got.close()
    assert b"".join(st.open_kept("k1", "json")) == b"other"
    # one byte changed in place: refused, as get_kept refuses it
    path = st._kept_path("k1", "json")
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert st.open_kept("k1", "json") is None and st.get_kept("k1", "json") is None
    assert st.open_kept("absent", "json") is None


def test_open_kept_as_read_checks_the_pieces_as_they_come(tmp_path, monkeypatch):
    """Store.open_kept(check="as read") (the replay's copy to -o FILE): nothing of the payload read
    when opened (a damaged file is opened), its pieces checked as they are read, and a damaged one
    raises KeptChanged once they are all read, before the iteration ends (a writer that renames
    into place when it has them all never puts it there); a kept file of an older format (no
    CRC-32) is not opened."""
    st = store_mod.Store(tmp_path / "store")
    payload = bytes(range(256)) * 100 + b"end"            # 25,603 bytes: 7 pieces of 4,096, the last 1,027
    assert st.put_kept("k1", "json", payload, {"rc": 0})
    monkeypatch.setattr(store_mod.KeptPayload, "PIECE", 4096)
    got = st.open_kept("k1", "json", check="as read")
    assert got is not None and b"".join(got) == payload and [len(p) for p in got] == [4096] * 6 + [1027]
    got.close()
    path = st._kept_path("k1", "json")
    data = bytearray(path.read_bytes())
    data[len(data) - len(payload) + 10] ^= 1              # a byte of the first piece, in place
    path.write_bytes(bytes(data))
    got = st.open_kept("k1", "json", check="as read")
    assert got is not None                                # opened: its payload not read yet
    seen, ended = [], False
    with pytest.raises(store_mod.KeptChanged):
        for piece in got:
            seen.append(piece)
        ended = True
    got.close()
    assert not ended and len(seen) == 7 and b"".join(seen) != payload
    assert st.open_kept("k1", "json") is None             # checked first: refused, as before
    # the header of format 1 (a SHA-256, no CRC-32): absent, whichever check
    head, _, rest = bytes(data).partition(b"\n")
    old = json.loads(head)
    old.pop("crc32")
    old["sha256"] = hashlib.sha256(rest).hexdigest()
    path.write_bytes(json.dumps(old).encode().ljust(len(head)) + b"\n" + rest)
    assert st.open_kept("k1", "json", check="as read") is None and st.open_kept("k1", "json") is None


def test_the_kept_crc_is_independent_of_how_the_payload_was_cut(tmp_path):
    """The CRC-32 in a kept file's header is that of the whole payload (zlib over the joined bytes),
    whatever pieces it was written in."""
    st = store_mod.Store(tmp_path / "store")
    payload = os.urandom(100_000)
    assert st.put_kept_pieces("k", "json", [payload[:1], payload[1:77_777], payload[77_777:]])
    head = json.loads(st._kept_path("k", "json").read_bytes().partition(b"\n")[0])
    assert head["crc32"] == zlib.crc32(payload) and head["size"] == len(payload)


def test_kept_json_report_of_another_invocation_is_copied_in_pieces(tmp_path, job, monkeypatch):
    """A later analyze of a job whose JSON report the store keeps, by another command line (so not
    served by replay.py: run_cli records no invocation), copies the kept report out in pieces
    (Store.open_kept, Job.output), never reading it whole (get_kept); the same bytes."""
    from traceview.job_cache import open_job
    from traceview.output import Pieces
    root = tmp_path / "store"
    first = analyze(tmp_path, job, "--store", root)
    monkeypatch.setattr(store_mod.KeptPayload, "PIECE", 4096)
    real = store_mod.Store.get_kept

    def whole(self, key, what):
        assert what != "json", "the kept report was read whole"
        return real(self, key, what)
    monkeypatch.setattr(store_mod.Store, "get_kept", whole)
    counted = Counted(monkeypatch)
    with monkeypatch.context() as m:
        no_document_read(m)
        assert analyze(tmp_path, job, "--store", root) == first and counted.calls == 0
    from traceview.document.options import AnalyzeOptions
    with executors.configured(executors.RunSettings(store=root, jobs=1)):
        run = lambda p: runs.run_analyze(p, AnalyzeOptions())      # noqa: E731
        first = b"".join(open_job([str(job)], {}, run, "json").output("json"))    # kept as written
        assert counted.calls == 1
        no_document_read(monkeypatch)
        j = open_job([str(job)], {}, lambda p: pytest.fail("analyzed"), "json")
    out = j.output("json")
    assert isinstance(out, Pieces)
    pieces = list(out)
    assert len(pieces) == -(-len(first) // 4096) and b"".join(pieces) == first
    assert b"".join(out) == first and j.render("json") == first      # again from the start; whole when asked


def _linked(root):
    (head,) = (root / "jobs").glob("*.json.kept")
    (payload,) = (root / "jobs").glob("*.json.payload")
    return head, payload


def test_a_json_report_written_to_a_file_is_kept_by_a_link_of_it(tmp_path, job, monkeypatch):
    """-o FILE on the store's filesystem: the kept report is FILE itself (one more link of it, no
    second copy), its header the size and CRC-32 of the bytes written; replayed from it; a FILE
    changed in place since is never replayed (analyzed again, and kept again by a link of the new
    file); a FILE removed leaves the kept link; the store checks as valid throughout."""
    root = tmp_path / "store"
    plain = analyze(tmp_path, job, "--no-store")
    counted = Counted(monkeypatch)
    out = tmp_path / "r.json"
    assert run_cli(["analyze", str(job), "-f", "json", "-o", str(out), "--jobs", "1", "--store", str(root)]) == 0
    assert out.read_bytes() == plain and counted.calls == 1
    head, payload = _linked(root)
    assert payload.stat().st_ino == out.stat().st_ino and out.stat().st_nlink == 2
    fields = json.loads(head.read_bytes())
    assert fields["linked"] is True and fields["size"] == len(plain) and fields["crc32"] == zlib.crc32(plain)
    assert head.stat().st_size < 4096 and store_mod.Store(root).check() == []
    with monkeypatch.context() as m:
        no_document_read(m)
        assert analyze(tmp_path, job, "--store", root) == plain and counted.calls == 1
    # FILE changed in place (the same size): the kept link is that file, no longer what was kept
    with open(out, "r+b") as f:
        f.seek(len(plain) // 2)
        f.write(b"#")
    assert store_mod.Store(root).get_kept(head.name.split(".")[0], "json") is None
    assert analyze(tmp_path, job, "--store", root) == plain
    assert counted.calls == 1                     # rendered from the kept document, and kept again
    head, payload = _linked(root)
    assert payload.read_bytes() == plain and payload.stat().st_ino != out.stat().st_ino
    assert store_mod.Store(root).check() == []
    # the file the kept report links removed by its user: still kept, still replayed
    for f in tmp_path.glob("out*.json"):
        if f.stat().st_ino == payload.stat().st_ino:
            f.unlink()
    assert payload.stat().st_nlink == 1
    with monkeypatch.context() as m:
        no_document_read(m)
        assert analyze(tmp_path, job, "--store", root) == plain and counted.calls == 1


def test_a_report_that_cannot_be_linked_is_kept_by_a_copy(tmp_path, job, monkeypatch):
    """Where the link is refused (a filesystem without links), the file written is copied into the
    store (a header, then it), and served as any kept report; on another filesystem (can_link
    False) it is kept as it is written out, as to standard output."""
    root = tmp_path / "store"
    plain = analyze(tmp_path, job, "--no-store")

    def refuse(*a, **k):
        raise PermissionError(1, "links not allowed here")
    with monkeypatch.context() as m:
        m.setattr(store_mod.os, "link", refuse)
        assert analyze(tmp_path, job, "--store", root) == plain
    assert sorted(p.name.split(".", 1)[1] for p in (root / "jobs").iterdir()) == ["document.kept", "json.kept"]
    (kept,) = (root / "jobs").glob("*.json.kept")
    assert kept.read_bytes().partition(b"\n")[2] == plain and store_mod.Store(root).check() == []
    counted = Counted(monkeypatch)
    assert analyze(tmp_path, job, "--store", root) == plain and counted.calls == 0
    root2 = tmp_path / "store2"
    monkeypatch.setattr(store_mod.Store, "can_link", lambda self, folder: False)
    assert analyze(tmp_path, job, "--store", root2) == plain
    (kept,) = (root2 / "jobs").glob("*.json.kept")
    assert kept.read_bytes().partition(b"\n")[2] == plain and not list((root2 / "jobs").glob("*.payload"))


def test_keep_linked_and_what_replaces_it(tmp_path):
    """Store.keep_linked: the payload is the file linked (same inode), read back by get_kept and
    open_kept; a file of another size than said keeps nothing; a kept copy put under the same name
    later removes the link; a payload without its header is a problem of the store."""
    s = store_mod.Store(tmp_path / "s")
    src = tmp_path / "report.json"
    src.write_bytes(b'{"a": 1}\n')
    assert s.can_link(tmp_path)
    assert not s.keep_linked("k", "json", src, 99, zlib.crc32(src.read_bytes()))
    assert s.get_kept("k", "json") is None and not list((tmp_path / "s" / "jobs").iterdir())
    assert s.keep_linked("k", "json", src, 9, zlib.crc32(b'{"a": 1}\n'), {"budget_violated": True})
    assert s._payload_path("k", "json").stat().st_ino == src.stat().st_ino
    assert s.get_kept("k", "json") == (b'{"a": 1}\n', {"budget_violated": True})
    got = s.open_kept("k", "json", check="as read")
    assert b"".join(got) == b'{"a": 1}\n'
    got.close()
    src.write_bytes(b'{"a": 2}\n')                  # in place (write_bytes truncates and writes)
    assert s.get_kept("k", "json") is None and s.open_kept("k", "json") is None
    assert s.keep_linked("k", "json", src, 9, zlib.crc32(b'{"a": 2}\n'))
    assert s.put_kept("k", "json", b"copy")
    assert s.get_kept("k", "json") == (b"copy", {}) and not s._payload_path("k", "json").exists()
    assert s.check() == []
    os.link(src, s._payload_path("j", "json"))
    assert any("without its header" in p for p in s.check())


def test_a_kept_payload_holds_only_its_own_file_unchanged(tmp_path):
    """KeptPayload.holds: true for the payload's own file (a linked report), also as the file a
    symlink names; false for a copy of it, the symlink itself, an absent file, or a kept file of
    header and payload; a file changed in place (the same size) is found out by its CRC-32 where the
    payload is checked as read."""
    store = store_mod.Store(tmp_path / "store")
    data = b'{"report": 1}\n' * 1000
    report = tmp_path / "r.json"
    report.write_bytes(data)
    assert store.keep_linked("k1", "json", report, len(data), zlib.crc32(data))
    for check in ("first", "as read"):
        got = store.open_kept("k1", "json", check=check)
        try:
            assert got.holds(report)
            copy = tmp_path / "copy.json"
            copy.write_bytes(data)
            link = tmp_path / "link.json"
            link.unlink(missing_ok=True)
            link.symlink_to(report)
            assert not got.holds(copy) and not got.holds(link) and not got.holds(tmp_path / "absent.json")
            assert got.holds(Path(os.path.realpath(link)))     # (write_file writes through a symlink)
        finally:
            got.close()
    assert store.put_kept("k2", "json", data)                  # header and payload in one file
    got = store.open_kept("k2", "json")
    try:
        (whole,) = (tmp_path / "store" / "jobs").glob("k2.json.kept")
        assert not got.holds(whole)
    finally:
        got.close()
    got = store.open_kept("k1", "json", check="as read")
    try:
        with open(report, "r+b") as f:                          # changed in place, the same size
            f.seek(5)
            f.write(b"#")
        with pytest.raises(store_mod.KeptChanged):
            got.holds(report)
    finally:
        got.close()


def test_keep_file_copies_where_it_cannot_link_and_only_what_was_written(tmp_path, monkeypatch):
    """Store.keep_file: a link refused, the file is copied into the store (read back); a file that
    is no longer the size and CRC-32 its pieces had when written keeps nothing."""
    s = store_mod.Store(tmp_path / "s")
    src = tmp_path / "report.json"
    src.write_bytes(b'{"a": 1}\n')

    def refuse(*a, **k):
        raise PermissionError(1, "links not allowed here")
    monkeypatch.setattr(store_mod.os, "link", refuse)
    assert not s.keep_file("k", "json", src, 9, zlib.crc32(b'{"a": 2}\n'))
    assert s.get_kept("k", "json") is None
    assert s.keep_file("k", "json", src, 9, zlib.crc32(b'{"a": 1}\n'), {"rc": 1})
    assert s.get_kept("k", "json") == (b'{"a": 1}\n', {"rc": 1}) and not s._payload_path("k", "json").exists()
    assert s.check() == []
