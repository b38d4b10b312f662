"""Inputs that make no sense are refused (one line naming the file or option, exit 2) or warned:
MFU outside (0, 1], a delivered rate above the peak, config-file typos and wrong types."""
import subprocess
import sys

import pytest
from helpers import TRACES

SMALL = TRACES / "kineto" / "hta_trace_compare_base"


def tv(*args):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True)


def one_line_exit_2(r, *words):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert r.stdout == ""


def test_mfu_percent_without_sign_is_refused_with_a_hint():
    r = tv("mfu", "--model", "deepseek-v3", "--gpu", "H200", "--mfu", "50")
    one_line_exit_2(r, "--mfu 50", "(0, 1]", "--mfu 0.5", "--mfu 50%")
    for bad in ("0", "-0.3", "1.01", "150%"):
        one_line_exit_2(tv("mfu", "--model", "deepseek-v3", "--gpu", "H200", "--mfu", bad), "--mfu")


def test_mfu_as_percent_and_as_fraction_agree():
    a = tv("mfu", "--model", "deepseek-v3", "--gpu", "H200", "--mfu", "50%")
    b = tv("mfu", "--model", "deepseek-v3", "--gpu", "H200", "--mfu", "0.5")
    assert a.returncode == 0 and a.stdout == b.stdout
    # 0.5 x the H200 bf16 dense peak of 989.5 TFLOP/s
    assert "tflops_per_gpu: 494.75" in a.stdout and "mfu: 0.5" in a.stdout
    assert tv("mfu", "--model", "deepseek-v3", "--gpu", "H200", "--mfu", "1").returncode == 0


def test_delivered_above_the_peak_is_a_warning():
    r = tv("mfu", "--model", "deepseek-v3", "--gpu", "H200", "--tflops-per-gpu", "5000")
    assert r.returncode == 0
    assert "warning" in r.stderr and "above the peak of 989.5" in r.stderr and "5.05" in r.stderr  # 5000 / 989.5
    assert "warning" not in tv("mfu", "--model", "deepseek-v3", "--gpu", "H200", "--tflops-per-gpu", "989.5").stderr


def test_analyze_warns_when_mfu_exceeds_one(tmp_path):
    import json
    r = tv("analyze", TRACES / "kineto" / "h200_moe" / "overlap.json.gz", "--peak-tflops", "10", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["flops"]["mfu"] > 1
    assert any("above the peak of 10.0" in w for w in doc["warnings"])


@pytest.mark.parametrize("text,words", [
    ("[attribution]\nlayr = ['^blk(\\\\d+)$']\n", ["attribution.layr", "unknown config key"]),
    ("[comm]\nregexp = ['x']\n", ["comm.regexp", "unknown config key"]),
    ("comm = 5\n", ["config key comm", "table"]),
    ("[comm]\nregex = 5\n", ["comm.regex", "list of strings"]),
    ("[comm]\nregex = '^my_coll'\n", ["comm.regex", "list of strings"]),
    ("[attribution]\nlayer = '^blk(\\\\d+)'\n", ["attribution.layer", "list of strings"]),
    ("[attribution]\nstage = [['x']]\n", ["attribution.stage", "[regex, name] pairs"]),
    ("[attribution]\nphase = [['x', 'sideways']]\n", ["attribution.phase", "unknown phase"]),
    ("[attribution]\nreplace_defaults = 'yes'\n", ["attribution.replace_defaults", "true or false"]),
    ("[budget]\nx = 1\n", ["unknown config key 'budget'"]),
])
def test_config_typos_and_wrong_types(tmp_path, text, words):
    cfg = tmp_path / "traceview.toml"
    cfg.write_text(text)
    out = tmp_path / "report.json"
    r = tv("analyze", SMALL, "--config", cfg, "-o", out)
    one_line_exit_2(r, str(cfg), *words)
    assert not out.exists()


def test_config_validation_in_diff_too(tmp_path):
    cfg = tmp_path / "traceview.toml"
    cfg.write_text("[comm]\nregexp = ['x']\n")
    one_line_exit_2(tv("diff", SMALL, SMALL, "--config", cfg), str(cfg), "comm.regexp")


def test_valid_config_still_loads(tmp_path):
    from traceview.config import load_rules
    cfg = tmp_path / "traceview.toml"
    cfg.write_text("[attribution]\nlayer = ['^blk(\\d+)$']\nstage = [['^r$', 'router']]\nreplace_defaults = true\n"
                   "[comm]\nregex = ['^my_coll']\n")
    r = load_rules(cfg)
    assert r.layer == [r"^blk(\d+)$"] and r.stage == [("^r$", "router")] and r.comm_regex == ["^my_coll"]


def test_version():
    from traceview import __version__
    r = tv("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"traceview {__version__}"


def test_every_preset_is_in_help():
    from traceview.flops.models import PRESETS, preset
    r = tv("mfu", "--help")
    text = " ".join(r.stdout.replace("│", " ").split())
    for name in PRESETS:
        preset(name)                    # it works
        assert name in text, name
    a = " ".join(tv("analyze", "--help").stdout.replace("│", " ").split())
    assert all(name in a for name in PRESETS)
