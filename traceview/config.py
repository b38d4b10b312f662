"""Attribution patterns: how annotation names map to layer, MoE stage and phase.

Defaults cover the conventions in use (docs/CONVENTIONS.md: which framework writes which
names); `--config traceview.toml` overrides or extends them:

    [attribution]
    # regexes whose first group is the layer number (tried in order; innermost range wins)
    layer = ['^blk(\\d+)/']
    # ordered [regex, stage] pairs; the first matching rule names the range's stage
    stage = [['^my_router$', 'router']]
    # ordered [regex, phase] pairs (phase: forward, backward, optimizer)
    phase = [['^fwd_pass$', 'forward']]
    replace_defaults = false   # true: use only the patterns above

    [comm]
    regex = ['^my_collective']   # extra communication kernel/op patterns (as --comm-regex)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError

STAGES = ("attention", "router", "dispatch", "experts", "shared_expert", "combine", "other")
PHASES = ("forward", "backward", "optimizer", "other")

DEFAULT_LAYER = [
    r"(?i)^layer[_ ]?(\d+)(?:/|$)",                      # layer_03/moe/dispatch (traceview markers, our H200 traces)
    r"(?:^|[./(])layers?[._](\d+)(?:[./)]|$)",            # layers.3, decoder.layers.3.mlp.experts, model.layers.3,
                                                          # FSDP2's `FSDP::pre_forward (layers.3.moe.experts)`
    r"^(?:nn\.Module: )?(?:\w*[^\WEe_])?(?:Layer|Block)_(\d+)$",  # with_modules: MixtralDecoderLayer_3,
                                                          # TransformerBlock_3; not MoELayer_0 / SparseMoeBlock_0,
                                                          # numbered per class, not per decoder layer
]
DEFAULT_STAGE = [
    (r"(?i)shared[_ ]?experts?|shared_mlp", "shared_expert"),   # shared_experts, SharedExpertMLP
    (r"(?i)dispatch", "dispatch"),                              # dispatch(F), token_dispatch
    (r"(?i)combine", "combine"),
    (r"(?i)router|(^|[./_])gate($|[./_()])|topk|gating", "router"),   # mlp.gate, TopKRouter, DeepseekV3TopkRouter
    (r"(?i)(^|[./_])(experts?|mlp|ffn|moe_mlp|grouped_mm)($|[./_()])", "experts"),
    (r"^nn\.Module: \w*(GroupedMLP|SequentialMLP|Experts|SparseTop2MLP)_\d+$", "experts"),  # TEGroupedMLP,
                                                          # GroupedExperts, MixtralBlockSparseTop2MLP (with_modules)
    (r"(?i)(^|[./_])(attn|attention|self_attn|self_attention)($|[./_()])", "attention"),
    (r"^nn\.Module: \w*Attention_\d+$", "attention"),  # MixtralAttention_0, SelfAttention_0 (with_modules)
]
DEFAULT_PHASE = [
    (r"\((F)\)$", "forward"),
    (r"\((B|W)\)$", "backward"),
    (r"^autograd::engine::evaluate_function", "backward"),
    (r"(?i)^(## )?backward( ##)?$", "backward"),
    (r"(?i)^(## )?forward( ##)?$|\.forward$", "forward"),
    (r"(?i)^(## )?optimi[sz]er( ##)?$|^Optimizer\.|^optimizer[._]step|^## optim", "optimizer"),
]


@dataclass
class Rules:
    layer: list[str] = field(default_factory=lambda: list(DEFAULT_LAYER))
    stage: list[tuple[str, str]] = field(default_factory=lambda: list(DEFAULT_STAGE))
    phase: list[tuple[str, str]] = field(default_factory=lambda: list(DEFAULT_PHASE))
    comm_regex: list[str] = field(default_factory=list)


def read_toml(path: Path, what: str) -> dict:
    """A TOML file's table; any problem is a one-line UsageError naming the file (`what`: e.g. 'config file')."""
    import tomllib  # (a run without a config or budget file reads none)
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise UsageError(path, f"{what} not found") from e
    except IsADirectoryError as e:
        raise UsageError(path, f"{what} is a directory") from e
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(path, f"cannot read {what} ({e})") from e
    except tomllib.TOMLDecodeError as e:
        raise UsageError(path, f"{what} is not valid TOML ({e})") from e


KEYS = {"attribution": ("layer", "stage", "phase", "replace_defaults"), "comm": ("regex",)}


def _strings(path: Path, key: str, value) -> list[str]:
    """A list of strings (a lone string is refused: it would be read character by character)."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise UsageError(path, f"config key {key} must be a list of strings (regexes), not {value!r}")
    return list(value)


def _pairs(path: Path, key: str, value, names: tuple[str, ...]) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not all(isinstance(x, list) and len(x) == 2
                                              and all(isinstance(y, str) for y in x) for x in value):
        raise UsageError(path, f"config key {key} must be a list of [regex, name] pairs, not {value!r}")
    for _, name in value:
        if name not in names:
            raise UsageError(path, f"config key {key}: unknown {key.split('.')[-1]} {name!r} "
                                   f"(choose from {', '.join(names)})")
    return [(r, n) for r, n in value]


def validate(path: Path, data: dict) -> dict:
    """Unknown tables and keys, and values of the wrong type: a one-line UsageError naming the file
    and the key (as budget files are checked)."""
    for table, value in data.items():
        if table not in KEYS:
            raise UsageError(path, f"unknown config key {table!r} (known tables: {', '.join(f'[{k}]' for k in KEYS)})")
        if not isinstance(value, dict):
            raise UsageError(path, f"config key {table} must be a table ([{table}]), not {value!r}")
        for key in value:
            if key not in KEYS[table]:
                raise UsageError(path, f"unknown config key {table}.{key} (known in [{table}]: "
                                       f"{', '.join(KEYS[table])})")
    att, comm = data.get("attribution", {}), data.get("comm", {})
    out = {"layer": _strings(path, "attribution.layer", att.get("layer", [])),
           "stage": _pairs(path, "attribution.stage", att.get("stage", []), STAGES),
           "phase": _pairs(path, "attribution.phase", att.get("phase", []), PHASES),
           "comm": _strings(path, "comm.regex", comm.get("regex", []))}
    rd = att.get("replace_defaults", False)
    if not isinstance(rd, bool):
        raise UsageError(path, f"config key attribution.replace_defaults must be true or false, not {rd!r}")
    out["replace_defaults"] = rd
    return out


def load_rules(path: Path | None, con=None) -> Rules:
    """The attribution rules: defaults, with a config file's patterns (checked on `con`, the
    analysis' DuckDB connection, where given)."""
    rules = Rules()
    if path is None:
        return rules
    path = Path(path)
    v = validate(path, read_toml(path, "config file"))
    layer, stage, phase = v["layer"], v["stage"], v["phase"]
    check_regexes(path, layer + [r for r, _ in stage] + [r for r, _ in phase], con=con)
    if v["replace_defaults"]:
        rules.layer, rules.stage, rules.phase = layer, stage, phase
    else:  # user patterns first: they win over the defaults
        rules.layer, rules.stage, rules.phase = layer + rules.layer, stage + rules.stage, phase + rules.phase
    rules.comm_regex = v["comm"]
    check_regexes(path, rules.comm_regex, con=con)
    return rules


def check_pattern_options(step_regex: str | None, comm_regex: list[str], con=None) -> None:
    """--step-regex and --comm-regex (analyze and diff) must compile: a usage error naming the option."""
    if step_regex is not None:
        check_regexes(None, [step_regex], "--step-regex", con=con)
    check_regexes(None, list(comm_regex), "--comm-regex", con=con)


def check_regexes(path: Path | None, regexes: list[str], option: str = "", con=None) -> None:
    """Each regex must compile in DuckDB (RE2), where it will run: a usage error naming it if not.
    `con`: the analysis' connection (engine.session.Session.con); without one, a private one."""
    import duckdb
    if not regexes:
        return
    con = con if con is not None else duckdb.connect()
    for rx in regexes:
        try:
            con.execute("SELECT regexp_matches('x', $rx)", {"rx": rx}).fetchall()
        except duckdb.Error as e:
            raise UsageError(path, f"{option + ': ' if option else ''}invalid regex {rx!r} "
                                   f"({str(e).splitlines()[0]})") from e
