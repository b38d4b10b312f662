"""What pydantic (typer's converter) makes of a command-line value of a plain type, where that is
plain: decimal integers, plain decimal numbers, text and paths (`plain`); UNSURE for any other
value, which typer's own converter then decides. Imports nothing of typer (the command line's
fast path, analyze_cli.parse, uses it before typer is imported); cli_params gives it to typer."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, List

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,15})?")
UNSURE = object()                 # `plain` has no answer: typer's converter decides


def _bool(value: Any) -> Any:
    return value if type(value) is bool else UNSURE


def _text(value: Any) -> Any:
    if type(value) is not str or "\x00" in value:
        return UNSURE
    try:
        value.encode("utf-8")       # a lone surrogate (undecodable argv bytes): pydantic refuses it
    except UnicodeEncodeError:
        return UNSURE
    return value


def _int(value: Any) -> Any:
    if type(value) is int:
        return value
    if type(value) is str and _INT.fullmatch(value):
        return int(value)
    return UNSURE


def _float(value: Any) -> Any:
    if type(value) is float:
        return value
    if type(value) is str and _FLOAT.fullmatch(value):
        return float(value)        # correctly rounded, as pydantic-core's parse of the same digits
    return UNSURE


def _path(value: Any) -> Any:
    if _text(value) is UNSURE or not value:
        return UNSURE
    return Path(value)


LEAF = {bool: _bool, str: _text, int: _int, float: _float, Path: _path}
LIST = {List[str]: _text, List[Path]: _path, list[str]: _text, list[Path]: _path}


def plain(annotation: Any, value: Any) -> Any:
    """pydantic's result for `value` of a parameter typed `annotation` (before typer's path checks),
    or UNSURE."""
    item = LIST.get(annotation)
    if item is not None:
        if not isinstance(value, (list, tuple)):
            return UNSURE
        out = [item(v) for v in value]
        return UNSURE if any(v is UNSURE for v in out) else out
    leaf = LEAF.get(annotation)
    return UNSURE if leaf is None else leaf(value)


