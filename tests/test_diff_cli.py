"""`python -m traceview diff BASE NEW`: exit codes for CI (--fail-if-slower), output formats,
input errors (exit 2, nothing written), and Markdown escaping of trace-derived names."""
import json
import subprocess
import sys

import pytest

from fixtures.scenarios import hostile_names, regression_pairs, tiny_breakdown

PAIRS_ALL = {p["name"]: p for p in regression_pairs()}
PAIRS = {k: v for k, v in PAIRS_ALL.items() if k in ("expert_gemm_fp32", "noise")}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    out = {}
    for name, p in PAIRS.items():
        out[name] = (p["base"].write(root / name, "base")["kineto"], p["new"].write(root / name, "new")["kineto"])
    two = PAIRS_ALL["straggler"]["base"]          # 2 ranks
    assert len(two.ranks) == 2
    out["two_ranks"] = two.write(root / "two", "job")["kineto"]
    out["hostile"] = (tiny_breakdown().write(root / "h", "tiny")["kineto"],
                      hostile_names().write(root / "h", "hostile")["kineto"])
    return out


def tv(*args):
    return subprocess.run([sys.executable, "-m", "traceview", "diff", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_fail_if_slower_exit_codes(files, tmp_path):
    b, n = files["expert_gemm_fp32"]
    pair = PAIRS["expert_gemm_fp32"]
    pct = 100 * pair["step_time_delta_ns"] / pair["base"].expected["step_time_ns"]   # 3.68 %, by construction
    out = tmp_path / "d.json"
    r = tv(b, n, "--fail-if-slower", f"{pct * 0.9:.3f}", "-f", "json", "-o", out)
    assert r.returncode == 1, r.stderr
    doc = json.loads(out.read_text())                     # the report is still written
    assert doc["schema"] == "traceview.diff/1" and doc["verdict"] == "regression"
    assert doc["delta"]["step_time_pct"] == pytest.approx(pct, rel=1e-9)
    r = tv(b, n, "--fail-if-slower", f"{pct * 1.1:.3f}")
    assert r.returncode == 0, r.stderr
    assert "REGRESSION" in r.stdout and "gemm:sgemm fp32" in r.stdout


def test_noise_never_fails(files):
    b, n = files["noise"]
    r = tv(b, n, "--fail-if-slower", "0", "-f", "markdown")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("### traceview diff: noise")


def test_input_errors_exit_2_and_write_nothing(files, tmp_path):
    b, _ = files["noise"]
    out = tmp_path / "never.md"
    r = tv(b, tmp_path / "missing.json", "-f", "markdown", "-o", out, "--fail-if-slower", "1")
    assert r.returncode == 2
    assert r.stderr.startswith("traceview: ") and len(r.stderr.strip().splitlines()) == 1
    assert "missing.json" in r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []
    empty = tmp_path / "empty.json"
    empty.write_text("")
    r = tv(empty, b, "-o", out)
    assert r.returncode == 2 and not out.exists()
    r = tv(b, b, "--format", "pdf")
    assert r.returncode == 2 and "unknown --format" in r.stderr


def test_markdown_escapes_trace_names(files):
    b, n = files["hostile"]
    r = tv(b, n, "-f", "markdown")
    assert r.returncode == 0, r.stderr
    assert "<img" not in r.stdout
    assert "kernel:&lt;img src=x onerror=alert(1)&gt;" in r.stdout


def test_esc_covers_markdown_specials():
    from traceview.reports.diff_markdown import esc
    s = esc("a|b\nc <x> `k` *e* _u_ [l](u) ~s~ & d")
    assert "\n" not in s
    for raw in ("|", "`", "*", "_", "[", "]", "~"):
        assert s.count(raw) == s.count("\\" + raw), raw
    assert "<" not in s and ">" not in s and "&lt;x&gt;" in s and "&amp;" in s
    assert esc("-1 ms").startswith("\\-") and esc("# h").startswith("\\#")


def test_side_from_several_files(files):
    """`--base-also`: a side made of files named one by one equals the directory of them."""
    d = files["two_ranks"]
    r = tv(d / "rank0.json", d, "--base-also", d / "rank1.json", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["base"]["ranks"] == doc["new"]["ranks"] == 2
    assert doc["delta"]["step_time_ns"] == 0 and doc["verdict"] == "noise"
    assert doc["base"]["step_time_ns"] == PAIRS_ALL["straggler"]["base"].expected["step_time_ns"]


def test_different_setups_are_named(files):
    """Comparing runs of different world sizes says so (in JSON, text and Markdown); a pair of the
    same setup has none."""
    base, _ = files["expert_gemm_fp32"]          # 1 rank
    r = tv(base, files["two_ranks"], "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["setup_differences"] == ["world size differs: base 1 rank(s), new 2"]
    assert "note: world size differs: base 1 rank(s), new 2" in tv(base, files["two_ranks"]).stdout
    assert "**Different setups**: world size differs" in tv(base, files["two_ranks"], "-f", "markdown").stdout
    assert "<strong>Different setups</strong>: world size differs" in tv(base, files["two_ranks"], "-f", "html").stdout
    b, n = files["expert_gemm_fp32"]
    assert json.loads(tv(b, n, "-f", "json").stdout)["setup_differences"] == []
