"""The command line: outputs, and bad input -> one line naming the file, exit 2, no traceback."""
import gzip
import json
import subprocess
import sys

import pytest
from helpers import TRACES

H200 = TRACES / "kineto" / "h200_moe" / "overlap.json.gz"
SMALL = TRACES / "kineto" / "hta_trace_compare_base" / "base.json.gz"


def tv(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def bad_inputs(tmp_path):
    good = SMALL.read_bytes()
    cases = {}
    cases["missing"] = (tmp_path / "nope.json", "no such file")
    d = tmp_path / "emptydir"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    cases["empty dir"] = (d, "no trace files")
    f = tmp_path / "trace.bin"
    f.write_bytes(b"\x00\x01garbage")
    cases["unknown format"] = (f, "unknown trace format")
    f = tmp_path / "cut.json.gz"
    f.write_bytes(good[: len(good) // 2])
    cases["truncated gz"] = (f, "truncated or corrupt gzip")
    f = tmp_path / "cut.json"
    f.write_bytes(gzip.decompress(good)[:5000])
    cases["truncated json"] = (f, "not valid JSON")
    f = tmp_path / "empty.json"
    f.write_bytes(b"")
    cases["empty file"] = (f, "empty")
    f = tmp_path / "legacy.json"
    f.write_text(json.dumps([{"name": "aten::mm", "ph": "X", "ts": 1, "dur": 2}]))
    cases["legacy list"] = (f, "legacy")
    cases["cpu only"] = (TRACES / "kineto" / "hta_cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                         "no GPU activity")
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 5, "pid": 0, "tid": 7, "args": {}}
    f = tmp_path / "text_ts.json"
    f.write_text(json.dumps({"traceEvents": [{**kernel, "ts": "abc"}]}))
    cases["timestamp not a number"] = (f, "wrong type or out of range")
    f = tmp_path / "huge_ts.json"
    f.write_text(json.dumps({"traceEvents": [{**kernel, "ts": 1e20}]}))
    cases["timestamp out of range"] = (f, "wrong type or out of range")
    import sqlite3
    f = tmp_path / "other.sqlite"
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    cases["sqlite, not nsys"] = (f, "not an Nsight Systems export")
    return cases


def test_bad_inputs_give_one_line_and_exit_2(tmp_path):
    for name, (path, words) in bad_inputs(tmp_path).items():
        out = tmp_path / f"out-{name.replace(' ', '_')}.json"
        r = tv("analyze", path, "-f", "json", "-o", out)
        assert r.returncode == 2, (name, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, (name, r.stderr)
        assert words.lower() in lines[0].lower() and str(path) in lines[0], (name, lines[0])
        assert "Traceback" not in r.stderr
        assert not out.exists(), name
        assert not list(tmp_path.glob(f".out-{name.replace(' ', '_')}*")), name


def test_debug_shows_traceback(tmp_path):
    r = tv("analyze", tmp_path / "nope.json", "--debug")
    assert r.returncode == 2 and "Traceback" in r.stderr


def test_json_output_file(tmp_path):
    out = tmp_path / "r.json"
    r = tv("analyze", H200, "-f", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "traceview.report/1"
    s = doc["summary"]
    for k in ("step_time_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns",
              "idle_ns", "comm_ns"):
        assert isinstance(s[k], int)
    assert isinstance(s["overlap_ratio"], float)
    assert [(x["rank"], x["step"]) for x in doc["steps"]] == [(0, 1), (0, 2), (0, 3)]
    for x in doc["steps"]:
        assert {"rank", "step", "start_ns", "step_time_ns", "compute_ns"} <= set(x)
    # the summary is one real step: the middle of the 3 by step time, with all its own parts
    mid = sorted(doc["steps"], key=lambda x: x["step_time_ns"])[1]
    assert (s["rank"], s["step"]) == (mid["rank"], mid["step"])
    for k in ("step_time_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns",
              "idle_ns", "comm_ns"):
        assert s[k] == mid[k]


def test_json_is_deterministic(tmp_path):
    a, b = tv("analyze", SMALL, "-f", "json"), tv("analyze", SMALL, "-f", "json")
    assert a.returncode == 0 and a.stdout == b.stdout


def test_text_summary(tmp_path):
    r = tv("analyze", H200)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "median step" in out and "overlap ratio" in out and "Top kernels" in out
    assert all(len(line) <= 100 for line in out.splitlines())
    many = tv("analyze", TRACES / "kineto" / "dlrm_8rank_v100")
    assert many.returncode == 0 and all(len(line) <= 100 for line in many.stdout.splitlines())


def test_unknown_format_option():
    r = tv("analyze", SMALL, "-f", "yaml")
    assert r.returncode == 2 and "unknown --format" in r.stderr


@pytest.mark.parametrize("argv", [["--help"], ["analyze", "--help"]])
def test_help(argv):
    assert tv(*argv).returncode == 0


def test_nsys_rep_without_kernels_is_converted_for_real_and_refused():
    """Issue 3: the real `nsys export` runs (CI installs Debian's nsight-systems) and the missing
    kernels are reported in one line, exit 2."""
    import tools
    tools.nsys()
    rep = TRACES / "nsys" / "h200_moe_nvtx_only_2022.4.nsys-rep"
    r = tv("analyze", rep)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and str(rep) in line and "no CUDA kernel records" in line and "-t cuda" in line


def test_multi_process_nsys_files_get_distinct_ranks(tmp_path):
    import shutil
    src = TRACES / "nsys" / "h100_2gpu_train_a2a_2026.2.sqlite"
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(src, a)
    shutil.copy(src, b)
    r = tv("analyze", a, b, "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(i["rank"], i["file"]) for i in doc["inputs"]] == [(0, "a.sqlite"), (1, "a.sqlite"), (2, "b.sqlite"),
                                                               (3, "b.sqlite")]
    assert any("renumbered" in w for w in doc["warnings"])


def test_ranks_from_file_names_then_order(tmp_path):
    """A directory of Kineto files without distributedInfo: ranks from the file names where they
    say (rank3, rank5), else by order with a warning."""
    from fixtures.scenarios import tiny_breakdown
    from fixtures.synth_writers import kineto_doc
    doc = kineto_doc(tiny_breakdown().ranks[0])
    doc.pop("distributedInfo", None)
    named = tmp_path / "named"
    named.mkdir()
    for r in (3, 5):
        (named / f"trace_rank{r}.json").write_text(json.dumps(doc))
    got = json.loads(tv("analyze", named, "-f", "json").stdout)
    assert [(i["rank"], i["file"], i["rank_source"]) for i in got["inputs"]] == [
        (3, "trace_rank3.json", "file name"), (5, "trace_rank5.json", "file name")]
    plain = tmp_path / "plain"
    plain.mkdir()
    for n in ("a.json", "b.json"):
        (plain / n).write_text(json.dumps(doc))
    got = json.loads(tv("analyze", plain, "-f", "json").stdout)
    assert [(i["rank"], i["file"], i["rank_source"]) for i in got["inputs"]] == [(0, "a.json", "order"),
                                                                                 (1, "b.json", "order")]
    assert sum("assigned rank" in w for w in got["warnings"]) == 2


def test_out_dir_that_cannot_be_a_directory(tmp_path):
    """--out-dir naming a file (or a path below one): one line naming it, exit 2, before any work."""
    f = tmp_path / "taken"
    f.write_text("x")
    for target in (f, f / "sub"):
        r = tv("analyze", SMALL, "--out-dir", target)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and str(target) in lines[0] and "not a directory" in lines[0], r.stderr
        assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"] and f.read_text() == "x"


@pytest.mark.parametrize("args,words", [
    (["--tokens-per-step", "-5"], "--tokens-per-step must be positive"),
    (["--peak-tflops", "0"], "--peak-tflops must be positive"),
    (["--top", "-1"], "--top must be 0 or more"),
    (["--step-regex", "("], "--step-regex: invalid regex '('"),
    (["--comm-regex", "["], "--comm-regex: invalid regex '['"),
])
def test_bad_options_give_one_line_and_exit_2(tmp_path, args, words):
    out = tmp_path / "r.json"
    r = tv("analyze", SMALL, *args, "-f", "json", "-o", out)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"traceview: {words}"), r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_bad_regexes_in_diff_and_config(tmp_path):
    other = TRACES / "kineto" / "hta_trace_compare_test"
    r = tv("diff", SMALL, other, "--step-regex", "(")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[0].startswith("traceview: --step-regex: invalid regex")
    cfg = tmp_path / "traceview.toml"
    cfg.write_text('[comm]\nregex = ["("]\n')
    r = tv("analyze", SMALL, "--config", cfg)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert str(cfg) in r.stderr and "invalid regex '('" in r.stderr


def test_utf8_byte_order_mark_is_read(tmp_path):
    """Some tools write a BOM before the JSON: read as the same trace (also when sniffed by content)."""
    plain = gzip.decompress(SMALL.read_bytes())
    f = tmp_path / "bom.trace"
    f.write_bytes(b"\xef\xbb\xbf" + plain)
    a, b = tv("analyze", SMALL, "-f", "json"), tv("analyze", f, "-f", "json")
    assert a.returncode == b.returncode == 0, b.stderr
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    assert da["steps"] == db["steps"] and da["summary"] == db["summary"]


def test_step_regex_matching_nothing_is_warned():
    r = tv("analyze", SMALL, "--step-regex", r"nomatch_(\d+)", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["steps_source"] == "whole trace (no step ranges found)"
    assert "--step-regex 'nomatch_(\\d+)' matched no step range with GPU work: the whole trace is one window " \
           "per rank" in doc["warnings"]
    default = json.loads(tv("analyze", SMALL, "-f", "json").stdout)
    assert not any("--step-regex" in w for w in default["warnings"])


def test_one_process_on_two_devices_is_warned(tmp_path):
    """A trace whose process drove two GPUs is still one rank; the report says its breakdown is
    one timeline over both devices."""
    d = json.loads(gzip.decompress(SMALL.read_bytes()))
    kernels = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    devices = {e["args"]["device"] for e in kernels}
    assert len(devices) == 1 and len(kernels) >= 2
    other = max(devices) + 1
    for e in kernels[1::2]:
        e["pid"], e["args"]["device"] = other, other
    f = tmp_path / "two_devices.json"
    f.write_text(json.dumps(d))
    r = tv("analyze", f, "-f", "json")
    assert r.returncode == 0, r.stderr
    devs = ", ".join(map(str, sorted(devices | {other})))
    assert json.loads(r.stdout)["warnings"] == [
        f"{f}: GPU activity on 2 devices ({devs}) in one process: its step breakdown is one timeline over all of them"]
