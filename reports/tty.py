"""Colour for the text report, only on a terminal.

`want_color(stream)`: True when the stream is a TTY, NO_COLOR is unset (https://no-color.org
convention) and TERM is not `dumb`; FORCE_COLOR=1 forces it. `colorize(text)` adds ANSI styles to a
rendered text report without changing its layout (escape codes only, so columns still line up):
section titles bold, budget violations red, a met budget green, warnings yellow.
"""
from __future__ import annotations

import os
import re

BOLD, RED, GREEN, YELLOW, CYAN, RESET = "\x1b[1m", "\x1b[1;31m", "\x1b[32m", "\x1b[33m", "\x1b[1;36m", "\x1b[0m"
_SEP = re.compile(r"^\s*-+(\s+-+)*\s*$")


def want_color(stream) -> bool:
    if os.environ.get("FORCE_COLOR") not in (None, "", "0"):
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def colorize(text: str) -> str:
    lines = text.split("\n")
    out = list(lines)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if i == 0 and line.startswith("traceview "):
            out[i] = BOLD + line + RESET
        elif line.lstrip().startswith("VIOLATED "):
            out[i] = RED + line + RESET
        elif line.startswith("Budget ") and "violated" in line:
            out[i] = RED + line + RESET
        elif line.startswith("Budget ") and line.endswith("met"):
            out[i] = GREEN + line + RESET
        elif line.startswith("warning:"):
            out[i] = YELLOW + line + RESET
        elif i + 1 < len(lines) and _SEP.match(lines[i + 1] or "x") and lines[i + 1].strip():
            out[i] = BOLD + line + RESET                      # a table's header row
        elif i + 2 < len(lines) and _SEP.match(lines[i + 2] or "x") and lines[i + 2].strip() \
                and not line.startswith(" "):
            out[i] = CYAN + line + RESET                      # the title above a table
    return "\n".join(out)
