"""`traceview mfu`: conversions between TFLOP/s, tokens/s and MFU, exact round trips."""
import random
from fractions import Fraction

import pytest
from typer.testing import CliRunner

from traceview.flops.cli import app

runner = CliRunner()
# DeepSeek-V3 training FLOPs per token at seq 4096, by hand (see test_flops_models): matmul weights
# 36,624,596,992 (no embedding, no norms) -> 2x; attention 61*2*128*4096*(192+128)/2; x3
DSV3_FPT = 3 * (2 * 36_624_596_992 + 61 * 128 * 4096 * (192 + 128))


def run(*args):
    res = runner.invoke(app, ["mfu", *args])
    out = dict(line.split(": ", 1) for line in res.stdout.splitlines() if ": " in line)
    return res, out


def test_gb300_record():
    res, out = run("--model", "DeepSeek-V3", "--gpu", "NVIDIA GB300", "--tflops-per-gpu", "1648")
    assert res.exit_code == 0, res.output
    assert DSV3_FPT == 250_449_887_232
    assert out["flops_per_token"].startswith(str(DSV3_FPT))
    assert float(out["tokens_per_second_per_gpu"]) == float(Fraction(1648 * 10**12, DSV3_FPT))  # 6580.16
    assert round(float(out["tokens_per_second_per_gpu"])) == 6580
    assert float(out["mfu"]) == 1648 / 2500          # GB300 bf16 dense 2,500 TFLOP/s
    assert out["tflops_per_gpu"] == "1648"


@pytest.mark.parametrize("tflops", ["1648", "989.5", "123.456", "0.001"] +
                         [repr(round(random.Random(i).uniform(1, 3000), i % 7)) for i in range(12)])
def test_tflops_tokens_tflops_round_trip_is_exact(tflops):
    _, a = run("--model", "deepseek-v3", "--gpu", "GB300", "--tflops-per-gpu", tflops)
    _, b = run("--model", "deepseek-v3", "--gpu", "GB300",
               "--tokens-per-second-per-gpu", a["tokens_per_second_per_gpu"])
    assert b["tflops_per_gpu"] == a["tflops_per_gpu"]
    assert float(b["tflops_per_gpu"]) == float(tflops)
    if float(tflops) > 2500:      # above the GB300 peak: an MFU above 1, which --mfu refuses
        assert "above the peak" in run("--model", "deepseek-v3", "--gpu", "GB300", "--tflops-per-gpu", tflops)[0].output
        return
    _, c = run("--model", "deepseek-v3", "--gpu", "GB300", "--mfu", a["mfu"])
    assert float(c["tflops_per_gpu"]) == float(tflops)


@pytest.mark.parametrize("tokens", ["6580", "12345.678", "55962.887506149076"])
def test_tokens_tflops_tokens_round_trip_is_exact(tokens):
    _, a = run("--model", "mixtral-8x7b", "--gpu", "H100", "--tokens-per-second-per-gpu", tokens)
    _, b = run("--model", "mixtral-8x7b", "--gpu", "H100", "--tflops-per-gpu", a["tflops_per_gpu"])
    assert b["tokens_per_second_per_gpu"] == a["tokens_per_second_per_gpu"]
    assert float(b["tokens_per_second_per_gpu"]) == float(tokens)


def test_step_time_and_tokens():
    # Llama-3-8B at seq 8192, by hand: weights (no embedding, no norms), attention causal
    d = 4096
    w = 32 * (d * d + 2 * d * 1024 + d * d + 3 * d * 14336) + 128256 * d
    fpt = 3 * (2 * w + 32 * 2 * 32 * 8192 * 256 // 2)
    res, out = run("--model", "llama-3-8b", "--gpu", "NVIDIA A100-SXM4-80GB", "--step-time", "2",
                   "--tokens-per-step", "16384")
    assert res.exit_code == 0, res.output
    assert float(out["tokens_per_second_per_gpu"]) == 8192
    assert float(out["tflops_per_gpu"]) == 8192 * fpt / 1e12
    assert float(out["mfu"]) == pytest.approx(8192 * fpt / 1e12 / 312, rel=1e-15)


def test_peak_override_and_seq_len():
    _, a = run("--model", "deepseek-v3", "--peak-tflops", "1000", "--tflops-per-gpu", "500")
    assert a["mfu"] == "0.5" and a["peak_tflops"].startswith("1000")
    _, b = run("--model", "deepseek-v3", "--seq-len", "8192", "--peak-tflops", "1000", "--tflops-per-gpu", "500")
    assert float(b["flops_per_token"].split()[0]) == DSV3_FPT + 3 * 61 * 128 * 4096 * 320


@pytest.mark.parametrize("args,fragment", [
    (["--model", "gpt-9", "--tflops-per-gpu", "1"], "unknown model 'gpt-9'"),
    (["--model", "deepseek-v3", "--gpu", "RTX 4090", "--tflops-per-gpu", "1"], "--peak-tflops"),
    (["--model", "deepseek-v3", "--tflops-per-gpu", "1", "--mfu", "0.5", "--gpu", "H200"], "exactly one"),
    (["--model", "deepseek-v3", "--mfu", "0.5"], "--mfu needs"),
    (["--model", "deepseek-v3", "--tflops-per-gpu", "fast"], "not a number"),
    (["--model", "deepseek-v3", "--step-time", "1"], "go together"),
    (["--tflops-per-gpu", "1"], "--model"),
    (["--model", "deepseek-v3", "--gpu", "H200", "--step-time", "1", "--tokens-per-step", "0"],
     "--tokens-per-step must be positive"),
    (["--model", "deepseek-v3", "--gpu", "H200", "--seq-len", "0", "--tflops-per-gpu", "5"],
     "--seq-len must be positive"),
])
def test_bad_usage_exits_2_with_one_line(args, fragment):
    res, _ = run(*args)
    assert res.exit_code == 2
    assert fragment in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_model_config_file(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text('layers = 1\nhidden = 4\nheads = 1\nvocab = 10\nseq_len = 8\ndense_ffn = 8\ngated_ffn = false\n')
    _, out = run("--model-config", str(f), "--peak-tflops", "1", "--tokens-per-second-per-gpu", "1e9")
    assert out["flops_per_token"].startswith("1200 ")     # see test_flops_trace: 3 * (2*168 + 64)
    assert out["tflops_per_gpu"] == "1.2" and out["mfu"] == "1.2"
    bad = tmp_path / "bad.toml"
    bad.write_text("layers = [")
    res, _ = run("--model-config", str(bad), "--tflops-per-gpu", "1")
    assert res.exit_code == 2 and "bad.toml" in res.stderr


def test_docs_example_is_the_real_output():
    """docs/FLOPS.md shows the GB300 record conversion; it must be what the command prints."""
    from pathlib import Path
    doc = (Path(__file__).parents[1] / "docs" / "FLOPS.md").read_text().splitlines()
    start = doc.index("    $ traceview mfu --model deepseek-v3 --gpu GB300 --tflops-per-gpu 1648") + 1
    shown = []
    for line in doc[start:]:
        if not line.startswith("    "):
            break
        shown.append(line[4:])
    res = runner.invoke(app, ["mfu", "--model", "deepseek-v3", "--gpu", "GB300", "--tflops-per-gpu", "1648"])
    assert res.exit_code == 0
    assert res.stdout.splitlines() == shown
    assert "36.63B without the embedding table" in shown[0]
