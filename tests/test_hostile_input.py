"""Hostile and broken input files: bounded memory, special files, deep nesting, gzip members, and
Kineto fields of the wrong type. Each refusal: one line naming the file, exit 2, no traceback,
nothing written; each dropped or ignored event: a warning with its count."""
import copy
import gzip
import json
import os
import socket
import subprocess
import sys
import time
import zlib

import pytest
from helpers import TRACES

from traceview.errors import TraceError, UsageError
from traceview.parsers import bounded_read, json_depth

SMALL = TRACES / "kineto" / "hta_trace_compare_base" / "base.json.gz"
FLOWS = TRACES / "kineto" / "hta_amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
GIB = 1 << 30


def tv(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def assert_refused(r, path, words, out=None):
    """exit 2, one line on stderr naming the file and the problem, no traceback, nothing written."""
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(path) in lines[0] and words.lower() in lines[0].lower(), lines[0]
    assert "Traceback" not in r.stderr
    if out is not None:
        assert not out.exists()
        assert not [p for p in out.parent.iterdir() if p.name.startswith("." + out.name)]
    return lines[0]


def analyze_json(path, *extra):
    r = tv("analyze", path, "-f", "json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def trace_dict(path=SMALL):
    return json.loads(gzip.decompress(path.read_bytes()))


def nesting(obj) -> int:
    """Depth of nested lists/dicts, by recursion over the decoded value (the second method)."""
    if isinstance(obj, dict):
        return 1 + max((nesting(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max((nesting(v) for v in obj), default=0)
    return 0


# ------------------------------------------------------------------ special files
def test_fifo_device_socket_and_link_to_dev_zero_are_refused_at_once(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json.gz"
    zero.symlink_to("/dev/zero")
    sock_path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        for path, words in ((fifo, "a FIFO (named pipe)"), (zero, "a character device"), (sock_path, "a socket"),
                            (tmp_path / "null.sqlite", "a character device")):
            if path.name == "null.sqlite":
                path.symlink_to("/dev/null")
            out = tmp_path / "out.json"
            t0 = time.monotonic()
            r = tv("analyze", path, "-f", "json", "-o", out, timeout=60)
            assert time.monotonic() - t0 < 30  # nothing waited for a writer or read the device
            assert_refused(r, path, words + ", not a regular file", out)
        r = tv("diff", fifo, SMALL, timeout=60)
        assert_refused(r, fifo, "a FIFO")
    finally:
        sock.close()


# ------------------------------------------------------------------ size ceiling and gzip bombs
def _zeros_member(n: int) -> bytes:
    return gzip.compress(bytes(n), compresslevel=9)


def _multi_member_bomb(path, total: int, member: int = 64 << 20) -> None:
    """A valid gzip file of total/member members, each inflating to `member` zero bytes."""
    one = _zeros_member(member)
    with open(path, "wb") as fh:
        for _ in range(total // member):
            fh.write(one)


def _single_member_bomb(path, total: int, claimed: int) -> None:
    """One gzip member inflating to `total` zero bytes (its trailer claims `claimed` bytes): the
    deflate output of a 64 MiB zero chunk after a full flush is the same for every such chunk."""
    chunk = bytes(64 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    assert c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH) == block
    tail = c.flush()[:-4] + claimed.to_bytes(4, "little")
    assert zlib.decompressobj(31).decompress(first + block + block, 1 << 28) == bytes(3 << 26)
    with open(path, "wb") as fh:
        fh.write(first)
        for _ in range(total // len(chunk) - 1):
            fh.write(block)
        fh.write(tail)


_PEAK = ("import resource, subprocess, sys\n"
         "r = subprocess.run([sys.executable, '-m', 'traceview', *sys.argv[1:]], capture_output=True, text=True)\n"
         "sys.stdout.write(f'{r.returncode} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
         "sys.stdout.write(r.stderr)\n")


def peak_rss_run(*args):
    """(exit code, peak RSS in bytes, stderr) of `traceview ARGS` in a fresh process tree."""
    r = subprocess.run([sys.executable, "-c", _PEAK, *map(str, args)], capture_output=True, text=True, timeout=600)
    first, _, stderr = r.stdout.partition("\n")
    code, kib = first.split()
    return int(code), int(kib) * 1024, stderr


@pytest.mark.parametrize("kind", ["multi-member", "single-member, trailer claims 1 GiB"])
def test_20_gib_gzip_bomb_is_refused_in_one_line_with_bounded_memory(tmp_path, kind):
    """The default ceiling against valid multi-member gzip; a lying trailer under a 2 GiB ceiling
    (the trailer's size is only a hint for the first buffer). zlib inflates zeros at ~0.1-1 GB/s,
    so the default ceiling costs up to a minute on a busy machine."""
    bomb = tmp_path / "bomb.json.gz"
    if kind == "multi-member":
        _multi_member_bomb(bomb, 20 * GIB)
        limit, extra = bounded_read.default_max_input_size(), ()
    else:
        _single_member_bomb(bomb, 20 * GIB, claimed=GIB)
        limit, extra = 2 * GIB, ("--max-input-size", "2G")
    assert bomb.stat().st_size < 40 << 20  # a few MB that would inflate to 20 GiB
    out = tmp_path / "r.json"
    code, peak, stderr = peak_rss_run("analyze", bomb, "-f", "json", "-o", out, *extra)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1, stderr
    assert bounded_read.default_max_input_size() <= 8 * GIB
    assert str(bomb) in lines[0] and "input size limit" in lines[0] and bounded_read.format_size(limit) in lines[0]
    assert peak < 1_000_000_000, f"peak RSS {peak / 1e6:.0f} MB"
    assert not out.exists()


def test_plain_file_over_the_limit_is_refused_before_reading(tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:  # sparse: 20 GiB that occupy no disk
        fh.write(b'{"traceEvents": [')
        fh.truncate(20 * GIB)
    code, peak, stderr = peak_rss_run("analyze", huge)
    assert code == 2 and peak < 1_000_000_000
    assert "file of 20 GiB: more than" in stderr and str(huge) in stderr and len(stderr.strip().splitlines()) == 1


def test_max_input_size_moves_the_ceiling_to_the_byte(tmp_path):
    inflated = len(gzip.decompress(SMALL.read_bytes()))
    plain = tmp_path / "base.json"
    plain.write_bytes(gzip.decompress(SMALL.read_bytes()))
    for path in (SMALL, plain):
        out = tmp_path / "r.json"
        r = tv("analyze", path, "-f", "json", "-o", out, "--max-input-size", inflated - 1)
        assert_refused(r, path, f"more than {inflated - 1} bytes, the input size limit", out)
        r = tv("analyze", path, "-f", "json", "--max-input-size", inflated)
        assert r.returncode == 0, r.stderr
    r = tv("diff", SMALL, SMALL, "--max-input-size", "1K")
    assert_refused(r, SMALL, "more than 1 KiB")


@pytest.mark.parametrize("text, expected", [("1000000", 1000000), ("8G", 8 * GIB), ("512MiB", 512 << 20),
                                            ("1.5g", 3 * GIB // 2), ("64 kb", 64 << 10), ("2T", 2 << 40)])
def test_size_values(text, expected):
    assert bounded_read.parse_size(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "abc", "nan", "inf", "1e400", "8X", "", "99999999T"])
def test_bad_size_values_are_one_line_usage_errors(text):
    with pytest.raises(UsageError):
        bounded_read.parse_size(text)
    r = tv("analyze", SMALL, "--max-input-size", text)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--max-input-size" in r.stderr


@pytest.mark.parametrize("one_pass", [1 << 10, 7777, bounded_read.ONE_PASS_BYTES])
@pytest.mark.parametrize("chunk", [100, bounded_read.CHUNK])
def test_streamed_inflation_equals_gzip_module(tmp_path, monkeypatch, one_pass, chunk):
    """Small buffers force the measure-then-inflate path (files over ONE_PASS_BYTES) and member
    boundaries inside a read; the bytes must equal what the gzip module inflates."""
    monkeypatch.setattr(bounded_read, "ONE_PASS_BYTES", one_pass)
    monkeypatch.setattr(bounded_read, "CHUNK", chunk)
    text = gzip.decompress(SMALL.read_bytes())
    f = tmp_path / "t.json.gz"
    for data in (gzip.compress(text), gzip.compress(text[:5000]) + gzip.compress(text[5000:]),
                 gzip.compress(text[:3]) + bytes(7) + gzip.compress(b"") + gzip.compress(text[3:]) + bytes(300)):
        f.write_bytes(data)
        assert gzip.decompress(data) == text  # the gzip module skips zero padding too
        assert bytes(bounded_read.read_bytes(f)) == text
        assert bytes(bounded_read.read_bytes(f, limit=len(text))) == text
        with pytest.raises(TraceError, match="input size limit"):
            bounded_read.read_bytes(f, limit=len(text) - 1)
    f.write_bytes(gzip.compress(text)[:-9])
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        bounded_read.read_bytes(f)


# ------------------------------------------------------------------ multi-member gzip
def test_multi_member_gzip_whose_first_member_size_equals_the_trailer_is_read(tmp_path):
    text = gzip.decompress(SMALL.read_bytes())
    if len(text) % 2:
        text += b" "
    half = len(text) // 2
    two = tmp_path / "a" / "trace.json.gz"
    one = tmp_path / "b" / "trace.json.gz"
    two.parent.mkdir()
    one.parent.mkdir()
    data = gzip.compress(text[:half]) + gzip.compress(text[half:])
    assert int.from_bytes(data[-4:], "little") == half  # the case that was taken for a truncated file
    two.write_bytes(data)
    one.write_bytes(gzip.compress(text))
    a, b = analyze_json(two), analyze_json(one)
    assert json.dumps(a).replace(str(two), "F") == json.dumps(b).replace(str(one), "F")
    assert a["summary"]["step_time_ns"] > 0
    # with zero padding after the last member (as some tools write it) too
    two.write_bytes(data + bytes(100))
    assert json.dumps(analyze_json(two)).replace(str(two), "F") == json.dumps(b).replace(str(one), "F")
    # truncated inside the second member, or garbage after the first: still refused
    for cut, words in ((data[: len(data) - 7], "truncated or corrupt gzip"),
                       (gzip.compress(text) + b"junk", "truncated or corrupt gzip")):
        two.write_bytes(cut)
        out = tmp_path / "r.json"
        assert_refused(tv("analyze", two, "-f", "json", "-o", out), two, words, out)


# ------------------------------------------------------------------ nesting
def test_json_depth_matches_a_recursive_count_on_the_corpus():
    for path in sorted((TRACES / "kineto").glob("*/*.json.gz"))[::3]:
        text = gzip.decompress(path.read_bytes())
        d = json_depth.depth(text)
        assert d == nesting(json.loads(text)), path
        assert d <= 7 < json_depth.MAX_DEPTH  # the deepest real trace nests 7 levels


@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 22])
def test_json_depth_with_escapes_and_brackets_in_strings(monkeypatch, chunk):
    monkeypatch.setattr(json_depth, "_CHUNK", chunk)
    if chunk < 1 << 22:
        monkeypatch.setattr(json_depth, "_WHOLE", 0)  # the chunked path for every text
    values = [{"a": "[[[", "b": ['\\"]]', "x\\\\", {"c": [["}"]]}]}, ['"', "\\", "{[", [[[[]]]]],
              {"k\\\"[": {"\\\\[": [1, "]}", {"z": [[[{}]]]}]}}, "plain", [], {}]
    for v in values:
        text = json.dumps(v).encode()
        assert json_depth.depth(text) == nesting(v) == json_depth.depth(memoryview(b" " + text)[1:]), text
        assert json_depth.depth_exceeds(text, nesting(v)) is False
        assert json_depth.depth_exceeds(text, nesting(v) - 1) is (nesting(v) > 0)


def _nested_under_a_skipped_key(depth_total: int) -> dict:
    """The small trace with an extra top-level key whose value makes the file `depth_total` deep."""
    d = trace_dict()
    v: list = []
    for _ in range(depth_total - 2):  # the top object is level 1, the outer list of the value level 2
        v = [v]
    d["zz_skipped"] = v
    assert nesting(d) == depth_total
    return d


def test_deep_nesting_is_refused_as_such_even_under_a_skipped_key(tmp_path):
    ok = tmp_path / "deep64.json"
    ok.write_text(json.dumps(_nested_under_a_skipped_key(64)))
    assert analyze_json(ok)["summary"]["step_time_ns"] == analyze_json(SMALL)["summary"]["step_time_ns"]
    deep = tmp_path / "deep65.json"
    deep.write_text(json.dumps(_nested_under_a_skipped_key(65)))
    out = tmp_path / "r.json"
    assert_refused(tv("analyze", deep, "-f", "json", "-o", out), deep, "nested more than 64 levels", out)
    very = tmp_path / "deep1e5.json.gz"
    text = json.dumps(trace_dict())[:-1] + ', "zz": ' + "[" * 100_000 + "]" * 100_000 + "}"
    very.write_bytes(gzip.compress(text.encode()))
    assert_refused(tv("analyze", very, "-f", "json", "-o", out), very, "nested more than 64 levels", out)
    args = json.dumps(trace_dict()).replace('"args": {', '"args": {"deep": ' + "[" * 5000 + "]" * 5000 + ", ", 1)
    deep.write_text(args)  # inside an event's args (decoded later, per event group)
    assert_refused(tv("analyze", deep, "-f", "json", "-o", out), deep, "nested more than 64 levels", out)


# ------------------------------------------------------------------ Kineto fields of the wrong type
def _kernels(d):
    return [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]


def test_flows_with_ids_or_ts_of_the_wrong_type_are_ignored_and_counted(tmp_path):
    d = json.loads(gzip.decompress(FLOWS.read_bytes()))
    base = analyze_json(FLOWS)
    flows = [e for e in d["traceEvents"] if e.get("cat") == "fwdbwd"]
    assert flows
    bad = [{**flows[0], "id": [1, 2]}, {**flows[1], "id": {"a": 1}}, {**flows[0], "id": True},
           {**flows[1], "ts": "abc"}, {**flows[0], "id": None}]
    d["traceEvents"] += bad
    f = tmp_path / "flows.json"
    f.write_text(json.dumps(d))
    doc = analyze_json(f)
    assert f"{f}: 5 fwdbwd flow events with an 'id' or 'ts' of the wrong type ignored" in doc["warnings"]
    assert doc["summary"] == base["summary"] and doc["layers"] == base["layers"]
    for fmt in ("text", "markdown", "html"):  # the warning reaches every format
        r = tv("analyze", f, "-f", fmt)
        assert r.returncode == 0 and "5 fwdbwd flow events" in " ".join(r.stdout.split()), fmt


def test_events_without_ts_name_or_args_are_counted_not_dropped_silently(tmp_path):
    d = trace_dict()
    ks = _kernels(d)
    assert len(ks) >= 6
    del ks[0]["ts"], ks[1]["name"]
    del ks[2]["args"]
    ks[3]["args"] = {}
    cpu = [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    del cpu[0]["ts"]
    f = tmp_path / "holes.json"
    f.write_text(json.dumps(d))
    doc = analyze_json(f)
    w = doc["warnings"]
    assert f"{f}: 2 GPU activities (kernels, memcpy, memset) without 'ts' or 'name' dropped" in w
    assert f"{f}: 1 CPU ranges without 'ts' or 'name' dropped" in w
    assert f"{f}: 2 GPU activities without a correlation or External id in 'args': linked to no launch, " \
           "so outside every step window" in w
    md = tv("analyze", f, "-f", "markdown").stdout
    assert "2 GPU activities (kernels, memcpy, memset) without 'ts' or 'name' dropped" in md
    # every GPU activity without a timestamp: refused, saying so
    for e in _kernels(d):
        e.pop("ts", None)
    for e in d["traceEvents"]:
        if e.get("cat") in ("gpu_memcpy", "gpu_memset"):
            e.pop("ts", None)
    f.write_text(json.dumps(d))
    out = tmp_path / "r.json"
    assert_refused(tv("analyze", f, "-f", "json", "-o", out), f, "no usable GPU activity", out)


@pytest.mark.parametrize("field, value, words", [
    ("ts", 1e300, "'ts' of 1e+300"), ("ts", 10 ** 16, "'ts' of 1e+16"), ("dur", 9e15, "'dur' of 9e+15"),
    ("ts", -1e300, "'ts' of 1e+300"), ("ts", True, "bool")])
def test_impossible_kineto_timestamps_are_refused(tmp_path, field, value, words):
    d = trace_dict()
    _kernels(d)[3][field] = value
    f = tmp_path / "t.json"
    f.write_text(json.dumps(d))
    out = tmp_path / "r.json"
    assert_refused(tv("analyze", f, "-f", "json", "-o", out), f, words, out)


def test_wrong_types_in_many_kineto_fields_never_give_an_internal_error(tmp_path):
    """Each field of a kernel, a CPU op and a flow set to each odd value: a report or a refusal."""
    d0 = json.loads(gzip.decompress(FLOWS.read_bytes()))
    odd = [None, "abc", [1, 2], {"a": 1}, True, -1, 1.5, "", 2 ** 70]
    first = {c: next(i for i, e in enumerate(d0["traceEvents"]) if e.get("cat") == c)
             for c in ("kernel", "cpu_op", "fwdbwd", "cuda_runtime")}
    files = []
    for c, i in first.items():
        for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"):
            d = copy.deepcopy(d0)
            for j, v in enumerate(odd):
                d["traceEvents"][i + 0][k] = v
                f = tmp_path / f"{c}-{k}-{j}.json"
                f.write_text(json.dumps(d))
                files.append(f)
    from traceview.parsers import kineto
    for f in files:
        try:
            kineto.read(f)
        except TraceError as e:
            assert str(f) in str(e) and "\n" not in str(e)


# ------------------------------------------------------------------ nothing written on a refusal
def test_refusals_write_nothing_into_out_dir_or_output(tmp_path):
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps(_nested_under_a_skipped_key(80)))
    flows = tmp_path / "flows.json"
    d = trace_dict()
    _kernels(d)[0]["ts"] = 1e300
    flows.write_text(json.dumps(d))
    cases = [(fifo, (), "a FIFO"), (deep, (), "nested more than 64"), (flows, (), "out of range"),
             (SMALL, ("--max-input-size", "2K"), "input size limit")]
    for i, (path, extra, words) in enumerate(cases):
        bundle = tmp_path / f"bundle{i}"
        out = tmp_path / f"r{i}.md"
        r = tv("analyze", path, "--out-dir", bundle, "-o", out, "-f", "markdown", *extra, timeout=120)
        assert_refused(r, path, words, out)
        assert not bundle.exists()
        r = tv("diff", SMALL, path, "-o", out, *extra, timeout=120)
        assert_refused(r, path, words, out)
