"""Model presets, parameter counts and FLOPs per token, checked against hand arithmetic."""
import json
from fractions import Fraction

import pytest

from traceview.errors import UsageError
from traceview.flops import models
from traceview.flops.models import config_from_dict, load_config, param_counts, preset, training_flops_per_token


def _dsv3_by_hand():
    d, h, layers, moe_layers, dense_layers = 7168, 128, 61, 58, 3
    attn = (d * 1536 + 1536 * h * (128 + 64)      # q_a_proj, q_b_proj
            + d * (512 + 64)                       # kv_a_proj_with_mqa
            + 512 * h * (128 + 128)                # kv_b_proj
            + h * 128 * d)                         # o_proj
    attn_norms = 1536 + 512                         # q_a_layernorm, kv_a_layernorm
    expert = 3 * d * 2048
    dense = 3 * d * 18432
    router = d * 256
    emb = head = 129280 * d
    norms = layers * (2 * d + attn_norms) + d
    total = (emb + head + norms + layers * attn + dense_layers * dense
             + moe_layers * (256 * expert + expert + router))
    active_incl_emb = (emb + head + norms + layers * attn + dense_layers * dense
                       + moe_layers * (8 * expert + expert + router))
    matmul = head + layers * attn + dense_layers * dense + moe_layers * (9 * expert + router)
    return total, active_incl_emb, matmul


def test_deepseek_v3_parameter_counts():
    total, active, _ = _dsv3_by_hand()
    pc = param_counts(preset("DeepSeek-V3"))
    assert pc["total"] == total == 671_026_404_352
    assert pc["active"] == active
    assert pc["active_excl_embedding"] == active - 129280 * 7168
    assert abs(pc["total"] / 671e9 - 1) < 0.01
    # DeepSeek's activated counts leave the embedding table out (docs/FLOPS.md): README_WEIGHTS.md
    # gives the main model's 36.7B, which the paper rounds to 37B.
    excl = pc["active_excl_embedding"]
    assert excl == 36_625_603_584
    assert abs(excl / 36.7e9 - 1) < 0.0025
    assert round(excl / 1e9) == 37
    assert pc["active"] == 37_552_282_624  # with the embedding: 1.5 % above 37B, 2.3 % above 36.7B


def test_deepseek_v3_mtp_module_by_hand():
    """README_WEIGHTS.md: the MTP module activates 2.4B incl. the shared embedding and head.
    One MoE layer (attention, 1 shared + 8 routed experts, router, norms) + enorm/hnorm: 2.44B."""
    d = 7168
    c = preset("deepseek-v3")
    pc = param_counts(c)
    layer = (pc["attention"] // 61 + 2 * d + 1536 + 512 + 9 * 3 * d * 2048 + 256 * d)
    assert layer == 585_318_400
    mtp_active = layer + 2 * d + pc["embedding"] + pc["head"]
    assert abs(mtp_active / 2.4e9 - 1) < 0.02
    assert abs((mtp_active + 2 * d * d) / 2.4e9 - 1) < 0.06  # counting eh_proj too: 2.54B


def test_deepseek_v2_matches_published():
    pc = param_counts(preset("deepseek-v2"))
    assert abs(pc["total"] / 236e9 - 1) < 0.002
    assert abs(pc["active_excl_embedding"] / 21e9 - 1) < 0.01
    assert abs(pc["active"] / 21e9 - 1) > 0.015  # with the embedding it would be 21.38B


def test_deepseek_v3_flops_per_token():
    _, _, matmul = _dsv3_by_hand()
    attention = 61 * 2 * 128 * 4096 * (192 + 128) // 2   # causal: half of S x S
    assert training_flops_per_token(preset("deepseek-v3")) == 3 * (2 * matmul + attention) == 250_449_887_232


@pytest.mark.parametrize("name,total_b,active_b", [
    ("deepseek-v2-lite", 15.7, None),   # "2.4B activated": 2.45B without the embedding, 2.2 % off
    ("mixtral-8x7b", 46.7, 12.9),
    ("qwen3-30b-a3b", 30.5, None),
    ("llama-3-8b", 8.03, 8.03),
])
def test_presets_match_published_sizes(name, total_b, active_b):
    pc = param_counts(preset(name))
    assert abs(pc["total"] / (total_b * 1e9) - 1) < 0.01
    if active_b:
        assert abs(pc["active"] / (active_b * 1e9) - 1) < 0.01


def test_mixtral_by_hand():
    d = 4096
    attn = d * 4096 + 2 * d * 1024 + 4096 * d
    expert = 3 * d * 14336
    total = 2 * 32000 * d + 32 * (attn + 8 * expert + 8 * d + 2 * d) + d
    assert param_counts(preset("mixtral")).get("total") == total


OVERLAP = dict(name="overlap", layers=4, hidden=2048, heads=16, vocab=32000, seq_len=4096,
               moe_ffn=2816, n_routed_experts=16, top_k=4, n_shared_experts=1, shared_ffn=5632)


def overlap_flops_per_token_by_hand() -> int:
    d, s = 2048, 4096
    per_layer = (3 * d * d + d * d            # qkv, o
                 + d * 16                       # router
                 + 4 * 3 * d * 2816             # top-4 routed experts (w1, w3, w2)
                 + 3 * d * 5632)                # shared expert
    matmul = 4 * per_layer + d * 32000          # + untied head; embedding excluded
    attention = 4 * 4 * s * d // 2              # QK^T + PV = 4*S*H*hd per token, causal half
    return 3 * (2 * matmul + attention)


def test_overlap_model_flops_per_token():
    cfg = config_from_dict(dict(OVERLAP))
    assert training_flops_per_token(cfg) == overlap_flops_per_token_by_hand() == 3_489_398_784
    # the tracegen script's own active-parameter count (overlap.meta.json: 613,564,416); we also
    # count a final norm (2048 weights) that moe_step.py does not have
    assert param_counts(cfg)["active"] == 613_564_416 + 2048


def test_config_files(tmp_path):
    toml = tmp_path / "m.toml"
    toml.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in OVERLAP.items()) + "\n")
    assert training_flops_per_token(load_config(toml)) == overlap_flops_per_token_by_hand()
    js = tmp_path / "m.json"
    js.write_text(json.dumps(OVERLAP))
    assert load_config(js) == load_config(toml)
    # a Hugging Face config.json is read as is (unrelated keys ignored, seq_len from --seq-len)
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                              "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                              "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                              "num_experts_per_tok": 2, "vocab_size": 32000, "rope_theta": 1e6,
                              "tie_word_embeddings": False, "head_dim": 128}))
    cfg = load_config(hf, seq_len=4096)
    assert param_counts(cfg)["total"] == param_counts(preset("mixtral-8x7b"))["total"]
    assert training_flops_per_token(cfg) == training_flops_per_token(preset("mixtral-8x7b"))


def test_seq_len_changes_only_attention():
    a = preset("llama-3-8b")
    b = models.resolve("llama-3-8b", seq_len=4096)
    diff = training_flops_per_token(a) - training_flops_per_token(b)
    assert diff == 3 * 32 * 2 * 32 * (8192 - 4096) * (128 + 128) / 2


@pytest.mark.parametrize("text,suffix,fragment", [
    ('layers = 4\nhiden = 3\n', ".toml", "unknown model config key 'hiden'"),
    ('layers = = 4', ".toml", "not valid TOML"),
    ('{"layers": 4', ".json", "not valid JSON"),
    ('{"layers": 4, "hidden": 64, "heads": 4, "vocab": 10}', ".json", "seq_len"),
    ('{"layers": 4, "hidden": 64, "heads": 4, "vocab": 10, "seq_len": 8}', ".json", "dense_ffn"),
    ('{"layers": "4", "hidden": 64, "heads": 4, "vocab": 10, "seq_len": 8, "dense_ffn": 5}', ".json", "integer"),
    ('[1, 2]', ".json", "table/object"),
])
def test_bad_config_files(tmp_path, text, suffix, fragment):
    p = tmp_path / f"bad{suffix}"
    p.write_text(text)
    with pytest.raises(UsageError) as e:
        load_config(p)
    assert fragment in e.value.problem
    assert e.value.path == str(p)


def test_missing_file_and_unknown_model(tmp_path):
    with pytest.raises(UsageError) as e:
        load_config(tmp_path / "nope.toml")
    assert e.value.path.endswith("nope.toml")
    with pytest.raises(UsageError) as e:
        preset("gpt-5")
    assert "unknown model 'gpt-5'" in e.value.problem and e.value.path is None
    with pytest.raises(UsageError):
        models.resolve("deepseek-v3", tmp_path / "x.toml")


def test_exact_fractions():
    assert isinstance(training_flops_per_token(preset("deepseek-v3")), Fraction)


@pytest.mark.parametrize("recording", ["h200_moe", "h200_moe_hostbound"])
def test_h200_model_config_counts_what_torch_counted(recording):
    """The recording script stored torch's own counts in the .meta.json: sum of numel() over the
    model's parameters, and active = all but the routed experts + top-k experts per layer."""
    from dataclasses import replace
    from pathlib import Path

    from tests.helpers import TRACES
    meta = json.loads((TRACES / "kineto" / recording / "overlap.meta.json").read_text())
    cfg = load_config(Path(__file__).parents[1] / "fixtures" / "h200_moe.model.toml")
    cfg = replace(cfg, moe_ffn=meta["ffn"], shared_ffn=2 * meta["ffn"], layers=meta["layers"],
                  n_routed_experts=meta["experts"], top_k=meta["topk"], hidden=meta["d_model"], heads=meta["heads"])
    pc = param_counts(cfg)
    assert pc["total"] == meta["params"]
    assert pc["active"] == meta["active_params"]
