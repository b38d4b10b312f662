"""Real tools the tests drive (nsys, headless Chromium): found on PATH, or the test is skipped with
the reason; in CI (`CI` set to anything but empty/0/false/no) a missing tool fails the test instead,
so a CI machine that lost a tool cannot pass by skipping."""
from __future__ import annotations

import os
import shutil

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_tool(*names: str, hint: str) -> str:
    """The path of the first of `names` found on PATH; else skip (outside CI) or fail (in CI)."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    what = " or ".join(names)
    if in_ci():
        pytest.fail(f"{what} not found on PATH but CI is set: {hint}", pytrace=False)
    pytest.skip(f"{what} not found on PATH: {hint}")


def nsys() -> str:
    return require_tool("nsys", hint="install Nsight Systems (.ci/install-nsys.sh)")


def chromium() -> str:
    return require_tool("chromium", "chromium-browser", hint="install headless Chromium (.ci/install-chromium.sh)")
