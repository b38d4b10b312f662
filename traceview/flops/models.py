"""Transformer/MoE model configurations, parameter counts and FLOPs per token.

The formula (written out in docs/FLOPS.md):

    forward FLOPs/token = 2 * N_matmul_active + sum over layers of attention scores
    attention scores (one layer, one token) = 2 * H * S * (d_qk + d_v) * c      (c = 1/2 if causal)
    training FLOPs/token = 3 * forward FLOPs/token                           (backward = 2x forward)

N_matmul_active = weights of the matrix multiplies one token goes through: attention projections,
dense FFNs, top-k routed experts, shared experts, routers, and the output head (counted even when
tied to the embedding). The embedding lookup and norm weights do no matmul and are excluded.
All counts are exact integers, so conversions built on them can use fractions.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from pathlib import Path

from ..errors import UsageError


@dataclass(frozen=True)
class ModelConfig:
    name: str
    layers: int
    hidden: int
    vocab: int
    seq_len: int
    heads: int
    kv_heads: int | None = None          # GQA key/value heads (default: heads)
    head_dim: int | None = None          # default: hidden // heads
    # MLA (multi-head latent attention, DeepSeek-V2/V3): set kv_lora_rank to enable
    q_lora_rank: int | None = None       # None/0: queries projected directly from the hidden state
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    qk_norm: bool = False                # per-head q/k RMSNorm (Qwen3): norm weights only
    dense_ffn: int = 0                   # intermediate size of the dense FFN layers
    first_k_dense: int = 0               # leading layers with a dense FFN (all layers if no experts)
    moe_ffn: int = 0                     # intermediate size of one routed expert
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    shared_ffn: int | None = None        # intermediate size of one shared expert (default moe_ffn)
    top_k: int = 0
    tied_embeddings: bool = False
    gated_ffn: bool = True               # SwiGLU: 3 matrices (gate, up, down); else 2
    causal: bool = True
    final_norm: bool = True              # an RMSNorm before the output head (most models)
    source: str = field(default="", compare=False)  # where the numbers come from

    # ---- derived -------------------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank)

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def mla_dims(self) -> tuple[int, int, int, int]:
        """(kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim) of an MLA model; a config
        that lacks one is refused as validate() refuses it."""
        kvr, nope, rope, vd = self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim
        if kvr is None or nope is None or rope is None or vd is None:
            missing = [k for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
                       if getattr(self, k) is None]
            raise UsageError(None, f"model config {self.name!r}: MLA needs {', '.join(missing)}")
        return kvr, nope, rope, vd

    @property
    def d_qk(self) -> int:
        if not self.is_mla:
            return self.hd
        _, nope, rope, _ = self.mla_dims()
        return nope + rope

    @property
    def d_v(self) -> int:
        return self.mla_dims()[3] if self.is_mla else self.hd

    @property
    def n_dense_layers(self) -> int:
        return self.layers if self.n_routed_experts == 0 else min(self.first_k_dense, self.layers)

    @property
    def n_moe_layers(self) -> int:
        return self.layers - self.n_dense_layers

    def validate(self, path=None) -> ModelConfig:
        def need(cond, msg):
            if not cond:
                raise UsageError(path, f"model config {self.name!r}: {msg}")
        for k in ("layers", "hidden", "vocab", "seq_len", "heads"):
            need(isinstance(getattr(self, k), int) and getattr(self, k) > 0, f"{k} must be a positive integer")
        if self.is_mla:
            for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                need(isinstance(getattr(self, k), int) and getattr(self, k) > 0, f"MLA needs {k}")
        else:
            need(self.head_dim or self.hidden % self.heads == 0, "hidden not divisible by heads: give head_dim")
            need((self.kv_heads or self.heads) > 0, "kv_heads must be positive")
        if self.n_routed_experts:
            need(self.moe_ffn > 0, "experts need moe_ffn (expert intermediate size)")
            need(0 < self.top_k <= self.n_routed_experts, "top_k must be in 1..n_routed_experts")
        if self.n_dense_layers:
            need(self.dense_ffn > 0, "dense layers need dense_ffn (intermediate size)")
        if self.n_shared_experts:
            need((self.shared_ffn or self.moe_ffn) > 0, "shared experts need shared_ffn or moe_ffn")
        return self


# ---- parameter counts -------------------------------------------------------------------------

def _attention_params(c: ModelConfig) -> tuple[int, int]:
    """(matmul weights, norm weights) of one attention block."""
    d, h = c.hidden, c.heads
    if c.is_mla:
        kvr, nope, rope, vd = c.mla_dims()
        qk = nope + rope
        if c.q_lora_rank:
            q = d * c.q_lora_rank + c.q_lora_rank * h * qk
            qnorm = c.q_lora_rank
        else:
            q, qnorm = d * h * qk, 0
        kv = d * (kvr + rope) + kvr * h * (nope + vd)
        o = h * vd * d
        return q + kv + o, qnorm + kvr
    kvh = c.kv_heads or h
    mm = d * h * c.hd + 2 * d * kvh * c.hd + h * c.hd * d
    return mm, (2 * c.hd if c.qk_norm else 0)


def param_counts(c: ModelConfig) -> dict[str, int]:
    """Parameter counts by part, plus `total`, `active` (per token, incl. the embedding table, the
    convention of the Mixtral/Qwen model cards), `active_excl_embedding` and `matmul_active`
    (the weights the FLOPs formula multiplies by 2: no embedding, no norms, head always)."""
    m = 3 if c.gated_ffn else 2
    d = c.hidden
    attn_mm, attn_norm = _attention_params(c)
    expert = m * d * c.moe_ffn
    shared = m * d * (c.shared_ffn or c.moe_ffn) * c.n_shared_experts
    router = d * c.n_routed_experts
    emb = c.vocab * d
    head = 0 if c.tied_embeddings else c.vocab * d
    norms = c.layers * (2 * d + attn_norm) + (d if c.final_norm else 0)  # two per layer (+ MLA/qk), final
    parts = {
        "embedding": emb,
        "attention": c.layers * attn_mm,
        "norms": norms,
        "dense_ffn": c.n_dense_layers * m * d * c.dense_ffn,
        "routed_experts": c.n_moe_layers * c.n_routed_experts * expert,
        "shared_experts": c.n_moe_layers * shared,
        "routers": c.n_moe_layers * router,
        "head": head,
    }
    total = sum(parts.values())
    inactive = c.n_moe_layers * (c.n_routed_experts - c.top_k) * expert
    active = total - inactive
    matmul_active = (parts["attention"] + parts["dense_ffn"] + c.n_moe_layers * c.top_k * expert
                     + parts["shared_experts"] + parts["routers"] + c.vocab * d)
    return {**parts, "total": total, "active": active, "active_excl_embedding": active - emb,
            "matmul_active": matmul_active}


def attention_flops_per_token(c: ModelConfig, seq_len: int | None = None) -> Fraction:
    """Forward score (QK^T) + value (PV) FLOPs of one token over all layers."""
    s = seq_len or c.seq_len
    full = 2 * c.heads * s * (c.d_qk + c.d_v)
    return Fraction(full * c.layers, 2 if c.causal else 1)


def forward_flops_per_token(c: ModelConfig, seq_len: int | None = None) -> Fraction:
    return 2 * param_counts(c)["matmul_active"] + attention_flops_per_token(c, seq_len)


def training_flops_per_token(c: ModelConfig, seq_len: int | None = None) -> Fraction:
    """Forward + backward (= 3x forward) FLOPs per token. Exact (a Fraction)."""
    return 3 * forward_flops_per_token(c, seq_len)


# ---- presets ------------------------------------------------------------------------------------

PRESETS: dict[str, ModelConfig] = {
    "deepseek-v3": ModelConfig(
        name="DeepSeek-V3", layers=61, hidden=7168, vocab=129280, seq_len=4096, heads=128,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        dense_ffn=18432, first_k_dense=3, moe_ffn=2048, n_routed_experts=256, n_shared_experts=1, top_k=8,
        source="deepseek-ai/DeepSeek-V3 config.json; seq_len 4096 = pre-training length (tech report)"),
    "deepseek-v2": ModelConfig(
        name="DeepSeek-V2", layers=60, hidden=5120, vocab=102400, seq_len=4096, heads=128,
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        dense_ffn=12288, first_k_dense=1, moe_ffn=1536, n_routed_experts=160, n_shared_experts=2, top_k=6,
        source="deepseek-ai/DeepSeek-V2 config.json"),
    "deepseek-v2-lite": ModelConfig(
        name="DeepSeek-V2-Lite", layers=27, hidden=2048, vocab=102400, seq_len=4096, heads=16,
        q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        dense_ffn=10944, first_k_dense=1, moe_ffn=1408, n_routed_experts=64, n_shared_experts=2, top_k=6,
        source="deepseek-ai/DeepSeek-V2-Lite config.json"),
    "mixtral-8x7b": ModelConfig(
        name="Mixtral-8x7B", layers=32, hidden=4096, vocab=32000, seq_len=4096, heads=32, kv_heads=8,
        head_dim=128, moe_ffn=14336, n_routed_experts=8, top_k=2,
        source="mistralai/Mixtral-8x7B-v0.1 config.json"),
    "qwen3-30b-a3b": ModelConfig(
        name="Qwen3-30B-A3B", layers=48, hidden=2048, vocab=151936, seq_len=4096, heads=32, kv_heads=4,
        head_dim=128, qk_norm=True, moe_ffn=768, n_routed_experts=128, top_k=8,
        source="Qwen/Qwen3-30B-A3B config.json"),
    "llama-3-8b": ModelConfig(
        name="Llama-3-8B", layers=32, hidden=4096, vocab=128256, seq_len=8192, heads=32, kv_heads=8,
        head_dim=128, dense_ffn=14336,
        source="meta-llama/Meta-Llama-3-8B config.json"),
}
_ALIASES = {"deepseek-v3-671b": "deepseek-v3", "dsv3": "deepseek-v3", "deepseek-v2lite": "deepseek-v2-lite",
            "deepseek-v2-236b": "deepseek-v2", "dsv2": "deepseek-v2",
            "mixtral": "mixtral-8x7b", "mixtral-8x7b-v0.1": "mixtral-8x7b", "qwen3-30b": "qwen3-30b-a3b",
            "llama3-8b": "llama-3-8b", "llama-3.1-8b": "llama-3-8b", "meta-llama-3-8b": "llama-3-8b"}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def preset(name: str) -> ModelConfig:
    k = _key(name)
    k = _ALIASES.get(k, k)
    if k not in PRESETS:
        raise UsageError(None, f"unknown model {name!r}; presets: {', '.join(PRESETS)} (or pass --model-config FILE)")
    return PRESETS[k]


# ---- config files -------------------------------------------------------------------------------

# Hugging Face config.json names -> ours (so a model's config.json can be passed as is)
_HF = {
    "num_hidden_layers": "layers", "hidden_size": "hidden", "vocab_size": "vocab",
    "num_attention_heads": "heads", "num_key_value_heads": "kv_heads",
    "first_k_dense_replace": "first_k_dense", "moe_intermediate_size": "moe_ffn",
    "num_local_experts": "n_routed_experts", "num_experts": "n_routed_experts",
    "num_experts_per_tok": "top_k", "tie_word_embeddings": "tied_embeddings",
    "shared_expert_intermediate_size": "shared_ffn", "seq_length": "seq_len", "max_seq_len": "seq_len",
}
_FIELDS = {f.name for f in fields(ModelConfig)}


def config_from_dict(raw: dict, path=None, seq_len: int | None = None) -> ModelConfig:
    hf = "model_type" in raw or "architectures" in raw
    out: dict = {}
    for k, v in raw.items():
        k2 = _HF.get(k, k)
        if k2 in _FIELDS:
            out[k2] = v
        elif k == "intermediate_size":
            out["_intermediate"] = v
        elif not hf:
            raise UsageError(path, f"unknown model config key {k!r} (known: {', '.join(sorted(_FIELDS))})")
    inter = out.pop("_intermediate", None)
    if inter is not None:
        # Mixtral: intermediate_size is the expert size; DeepSeek/Qwen: the dense FFN size
        if out.get("n_routed_experts") and not out.get("moe_ffn"):
            out["moe_ffn"] = inter
        else:
            out.setdefault("dense_ffn", inter)
    if hf and out.get("n_shared_experts") is None and out.get("shared_ffn"):
        out["n_shared_experts"] = 1  # Qwen2-MoE style: one shared expert of shared_expert_intermediate_size
    if seq_len:
        out["seq_len"] = seq_len
    out.setdefault("name", Path(path).stem if path else "custom")
    missing = [k for k in ("layers", "hidden", "vocab", "heads", "seq_len") if k not in out]
    if missing:
        raise UsageError(path, f"model config lacks {', '.join(missing)}"
                         + (" (pass --seq-len)" if "seq_len" in missing else ""))
    for k, v in list(out.items()):
        if v is None and k not in ("q_lora_rank", "kv_lora_rank", "kv_heads", "head_dim", "shared_ffn",
                                   "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            out.pop(k)
    try:
        cfg = ModelConfig(**out)
    except TypeError as e:
        raise UsageError(path, f"bad model config: {e}") from None
    bad = [f.name for f in fields(ModelConfig) if f.type in ("int", "int | None") and getattr(cfg, f.name) is not None
           and (not isinstance(getattr(cfg, f.name), int) or isinstance(getattr(cfg, f.name), bool))]
    if bad:
        raise UsageError(path, f"model config: {', '.join(bad)} must be integers")
    return cfg.validate(path)


def load_config(path: str | Path, seq_len: int | None = None) -> ModelConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise UsageError(p, f"cannot read model config: {e.strerror or e}") from None
    import json  # here, not at start-up: only a model config file needs a parser
    import tomllib
    try:
        raw = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        kind = "TOML" if p.suffix.lower() == ".toml" else "JSON"
        raise UsageError(p, f"model config is not valid {kind}: {e}") from None
    if not isinstance(raw, dict):
        raise UsageError(p, "model config must be a table/object of keys")
    raw = raw.get("model", raw) if isinstance(raw.get("model"), dict) else raw
    return config_from_dict(raw, p, seq_len)


def resolve(model: str | None = None, model_config: str | Path | None = None,
            seq_len: int | None = None) -> ModelConfig | None:
    """The model of --model NAME / --model-config FILE (not both), with an optional --seq-len."""
    if model and model_config:
        raise UsageError(None, "give --model or --model-config, not both")
    if seq_len is not None and seq_len <= 0:
        raise UsageError(None, "--seq-len must be positive")
    if model_config:
        return load_config(model_config, seq_len)
    if model:
        cfg = preset(model)
        return replace(cfg, seq_len=seq_len) if seq_len else cfg
    return None
