"""Option values of the command line converted without typer's pydantic path, where that is plain.

typer (0.29) converts each parameter's value, given or default, through a pydantic TypeAdapter it
builds on first use: importing pydantic and building the adapters of a command's 25 options costs
0.15-0.2 s of CPU in every run, more than the rest of the command line's start-up. Every parameter
of traceview's commands (and their --help) is a str, int, float, bool, Path or a list of str or
Path, without typer's constraints (min/max, parser). `Command`, the class of every command
(`Group`, of `traceview` itself), gives each such parameter a converter that returns what pydantic
returns for the values a command line carries in practice (decimal integers, plain decimal
numbers, text, paths: cli_values.plain; a path then passes typer's own checks) and hands any other value
to typer's own converter, built only then: a value pydantic refuses or reads its own way (" 12",
"1e3", "nan", "", text that is not valid Unicode) gets typer's result, message and exit status,
unchanged. Where this typer keeps its parameters otherwise, nothing is installed and typer
converts every value as before.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List

import typer.core

from .cli_values import LEAF, LIST, UNSURE, plain


class _Converter:
    """Stands where typer keeps a parameter's converter (its `_runtime_param`)."""

    def __init__(self, param: Any) -> None:
        from typer._param_types import coerce_cli_path
        self.annotation = param.type_descriptor.annotation
        self.info = param.type_descriptor.parameter_info
        self.paths = self.annotation in (Path, List[Path], list[Path])
        self.check_path = coerce_cli_path
        self.typer_converter: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:
            return () if multi else None
        if not (multi and isinstance(value, str)):
            got = plain(self.annotation, value)
            if got is not UNSURE:
                if not self.paths:
                    return got
                check = self.check_path
                if isinstance(got, list):
                    return [check(p, self.info, path_type=Path, param=param, ctx=ctx) for p in got]
                return check(got, self.info, path_type=Path, param=param, ctx=ctx)
        if self.typer_converter is None:
            from typer._coercion import build_runtime_param
            self.typer_converter = build_runtime_param(param.type_descriptor)
        return self.typer_converter.coerce(value, param=param, ctx=ctx)


def _plain_param(param: Any) -> bool:
    desc = getattr(param, "type_descriptor", None)
    info = getattr(desc, "parameter_info", None)
    if desc is None or info is None or getattr(param, "_runtime_param", False) is not None:
        return False
    if getattr(desc, "file_annotation", True) is not None or desc.annotation not in (*LEAF, *LIST):
        return False
    return all(getattr(info, a, 0) is None for a in ("parser", "min", "max", "path_type"))


def install(params: list) -> int:
    """Give each plain parameter of `params` the converter above; how many got it."""
    try:
        import typer._coercion  # noqa: F401  (the fallback: present in the typer this was made for)
        import typer._param_types  # noqa: F401
    except ImportError:
        return 0
    done = 0
    for p in params:
        if _plain_param(p):
            p._runtime_param = _Converter(p)
            done += 1
    return done


class _PlainValues:
    """Mixed into typer's command classes: the plain parameters (--help included) converted as above."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        install(self.get_params(ctx))  # type: ignore[attr-defined]
        return super().parse_args(ctx, args)  # type: ignore[misc]


class Command(_PlainValues, typer.core.TyperCommand):
    """typer's command, its plain parameters converted as above."""


class Group(_PlainValues, typer.core.TyperGroup):
    """typer's group of commands (`traceview` itself: --version, --help), its options converted as above."""
