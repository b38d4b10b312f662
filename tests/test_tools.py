"""The helper that finds real tools for the tests: skip with the reason outside CI, fail in CI."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tools
from helpers import ROOT


@pytest.fixture
def empty_path(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", str(d))
    return d


@pytest.mark.parametrize("value,ci", [("", False), ("0", False), ("false", False), ("true", True), ("1", True),
                                      ("TRUE", True)])
def test_in_ci_reads_the_ci_variable(monkeypatch, value, ci):
    monkeypatch.setenv("CI", value)
    assert tools.in_ci() is ci


def test_missing_tool_skips_with_the_reason_outside_ci(empty_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as e:
        tools.chromium()
    assert "chromium or chromium-browser not found on PATH" in str(e.value)
    assert ".ci/install-chromium.sh" in str(e.value)
    with pytest.raises(pytest.skip.Exception) as e:
        tools.nsys()
    assert "nsys not found on PATH" in str(e.value) and ".ci/install-nsys.sh" in str(e.value)


def test_missing_tool_fails_in_ci(empty_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    for find, name in ((tools.chromium, "chromium"), (tools.nsys, "nsys")):
        with pytest.raises(pytest.fail.Exception) as e:
            find()
        assert name in str(e.value) and "CI is set" in str(e.value)


def test_tool_on_path_is_returned_in_and_out_of_ci(empty_path, monkeypatch):
    exe = empty_path / "chromium-browser"          # the second name is found too
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    for ci in ("", "true"):
        monkeypatch.setenv("CI", ci)
        assert tools.chromium() == str(exe)
    (empty_path / "nsys").write_text("")           # not executable: not a tool
    with pytest.raises(pytest.fail.Exception):
        tools.nsys()


def _pytest_without_tools(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(tmp_path)                    # neither chromium nor nsys
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider",
                           "tests/test_html_chromium.py", "tests/test_nsys_parser.py::"
                           "test_report_conversion_by_real_nsys_outside_a_store_leaves_nothing"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_real_test_files_skip_without_the_tools_and_fail_in_ci(tmp_path):
    """The Chromium and nsys tests themselves, run with a PATH that has neither tool."""
    n_chromium = sum(1 for line in (ROOT / "tests" / "test_html_chromium.py").read_text().splitlines()
                     if line.startswith("def test_"))
    out = _pytest_without_tools(tmp_path, None)
    assert out.returncode == 0, out.stdout[-3000:]
    assert f"{n_chromium + 1} skipped" in out.stdout, out.stdout[-3000:]
    assert "chromium or chromium-browser not found on PATH" in out.stdout
    assert "nsys not found on PATH" in out.stdout
    out = _pytest_without_tools(tmp_path, "true")
    assert out.returncode == 1, out.stdout[-3000:]
    # the Chromium tests fail in their fixture (pytest counts them as errors), the nsys test in its body
    assert f"1 failed, {n_chromium} errors" in out.stdout, out.stdout[-3000:]
    assert "CI is set" in out.stdout
