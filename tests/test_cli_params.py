"""cli_params: the command line's option values converted without pydantic give what typer's own
(pydantic) converter gives: the same value and type, or the same error message, on every parameter
of every command, for generated values (decimal-looking text, text with spaces, signs, exponents,
NaN, lone surrogates, NUL, empty strings) and for the defaults."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer.core
from hypothesis import given, settings, strategies as st
from typer._coercion import build_runtime_param
from typer.main import get_command

from traceview import cli_params
from traceview.cli import app

GROUP = get_command(app)


def _params():
    ctx = typer.core._click.Context(GROUP, info_name="traceview")
    out = [("traceview", p, ctx) for p in GROUP.get_params(ctx)]
    for name, cmd in GROUP.commands.items():     # type: ignore[attr-defined]
        sub = typer.core._click.Context(cmd, info_name=name, parent=ctx)
        out += [(name, p, sub) for p in cmd.get_params(sub)]
    return out


PARAMS = _params()


def outcome(converter, value, param, ctx):
    try:
        got = converter.coerce(value, param=param, ctx=ctx)
    except typer.core._click.exceptions.ClickException as e:
        return ("error", type(e).__name__, e.format_message())
    return ("value", type(got).__name__, repr(got),        # repr: nan equals nan
            [type(v).__name__ for v in got] if isinstance(got, (list, tuple)) else None)


def both(param, ctx, value):
    fast = cli_params._Converter(param)
    return outcome(fast, value, param, ctx), outcome(build_runtime_param(param.type_descriptor), value, param, ctx)


def test_every_parameter_of_every_command_is_converted_here():
    assert len(PARAMS) > 60
    missing = [(c, p.name) for c, p, _ in PARAMS if not cli_params._plain_param(p)]
    assert missing == []


def test_the_command_classes_install_the_converter():
    ctx = typer.core._click.Context(GROUP, info_name="traceview")
    analyze = GROUP.commands["analyze"]       # type: ignore[attr-defined]
    sub = typer.core._click.Context(analyze, info_name="analyze", parent=ctx)
    analyze.parse_args(sub, ["x.json", "--top", "3"])
    assert all(isinstance(p._runtime_param, cli_params._Converter) for p in analyze.get_params(sub))
    assert sub.params["top"] == 3 and sub.params["paths"] == [Path("x.json")]


@pytest.mark.parametrize("command,param,ctx", PARAMS, ids=[f"{c}-{p.name}" for c, p, _ in PARAMS])
def test_defaults_and_missing_values(command, param, ctx):
    for value in (param.default, None, (), [], "x"):
        fast, typer_own = both(param, ctx, value)
        assert fast == typer_own, value


TEXT = st.one_of(
    st.from_regex(r"[ +-]?[0-9_]{0,25}(\.[0-9]{0,20})?([eE][+-]?[0-9]{1,3})?[ \n]?", fullmatch=True),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "", " ", "0", "-0", "00", "01", "1.", ".5", "-0.0", "1_000",
                     "10.0", "+5", "0x10", "١٢", "a\x00b", "\udcff", "caf\xe9.json", "dir/", "./a//b", "~",
                     "-", "true", "yes", "on", "1", "False"]),
    st.text(max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(PARAMS))), TEXT)
def test_a_given_value_converts_as_typer_converts_it(i, text):
    _, param, ctx = PARAMS[i]
    value = (text,) if (param.multiple or param.nargs == -1) else text
    fast, typer_own = both(param, ctx, value)
    assert fast == typer_own


@settings(max_examples=100, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=4))
def test_lists_of_values(texts):
    for _, param, ctx in PARAMS:
        if param.multiple or param.nargs == -1:
            fast, typer_own = both(param, ctx, tuple(texts))
            assert fast == typer_own


def test_paths_that_exist_go_through_typers_checks(tmp_path):
    f = tmp_path / "t.json"
    f.write_text("{}")
    for _, param, ctx in PARAMS:
        if param.type_descriptor.annotation is Path:
            for v in (str(f), str(tmp_path), os.devnull):
                fast, typer_own = both(param, ctx, v)
                assert fast == typer_own and fast[2] == repr(Path(v))


def test_plain_answers_only_for_what_it_is_sure_of():
    u = cli_params.UNSURE
    assert cli_params.plain(int, "12") == 12 and cli_params.plain(int, "-7") == -7
    assert [cli_params.plain(int, v) for v in (" 12", "012", "1e3", "1.0", "+1", "1_0", "", True)] == [u] * 8
    assert cli_params.plain(float, "2.50") == 2.5 and cli_params.plain(float, "3") == 3.0
    assert [cli_params.plain(float, v) for v in ("nan", "1e3", ".5", "1.", " 1", 3)] == [u] * 6
    assert cli_params.plain(str, "\udcff") is u and cli_params.plain(Path, "") is u
    assert cli_params.plain(list[Path], ("a", "b/")) == [Path("a"), Path("b")]
    assert cli_params.plain(list[str], ("a", "\udcff")) is u and cli_params.plain(list[str], "a") is u
