"""action.yml run as GitHub runs a composite action: its `run:` steps in order, each with its
`shell` (bash as `bash --noprofile --norc -eo pipefail FILE`), `${{ inputs.* }}`,
`${{ github.action_path }}` and `${{ steps.*.outputs.* }}` substituted, GITHUB_STEP_SUMMARY /
GITHUB_OUTPUT (a fresh file per step) / GITHUB_ENV / GITHUB_WORKSPACE pointing at temp files, a
failing step skipping the rest except `if: always()`. `uses:` steps cannot run here and are skipped
(their `with:` expressions are still evaluated), as is the pip install of the action's own checkout
(the package is already installed in this environment, whose bin/ comes first on PATH).

The traces are simulator scenarios whose step times are known by construction (fixtures/scenarios.py).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from fixtures.scenarios import regression_pairs
from fixtures.synth_writers import write_kineto

yaml = pytest.importorskip("yaml")

ACTION = ROOT / "action.yml"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
BIN = str(Path(sys.executable).parent)


def _eval(expr: str, ctx: dict) -> str:
    m = re.fullmatch(r"inputs\.([A-Za-z0-9_-]+)", expr)
    if m:
        assert m.group(1) in ctx["inputs"], f"action.yml uses an undeclared input {m.group(1)}"
        return ctx["inputs"][m.group(1)]
    if expr == "github.action_path":
        return str(ROOT)
    m = re.fullmatch(r"steps\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)", expr)
    if m:
        return ctx["steps"].get(m.group(1), {}).get(m.group(2), "")
    raise AssertionError(f"expression not supported by this runner: {expr!r}")


def sub(text: str, ctx: dict) -> str:
    return EXPR.sub(lambda m: _eval(m.group(1), ctx), str(text))


def read_commands_file(path: Path) -> dict:
    """GITHUB_OUTPUT / GITHUB_ENV: `name=value` lines and `name<<DELIM` ... `DELIM` blocks."""
    out, lines = {}, path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
            continue
        if "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
        i += 1
    return out


def run_action(inputs: dict, workspace: Path, tmp: Path) -> dict:
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    declared = action["inputs"]
    assert not set(inputs) - set(declared), f"unknown inputs {set(inputs) - set(declared)}"
    for name, spec in declared.items():
        assert not spec.get("required") or name in inputs, f"required input {name} missing"
    ctx = {"inputs": {k: str(inputs.get(k, spec.get("default", ""))) for k, spec in declared.items()}, "steps": {}}
    tmp.mkdir(parents=True, exist_ok=True)
    summary, env_file = tmp / "step_summary.md", tmp / "github_env"
    summary.write_text("")
    env_file.write_text("")
    added_env: dict = {}
    failed, log = None, []
    for i, step in enumerate(action["runs"]["steps"]):
        cond = step.get("if")
        assert cond in (None, "always()"), f"condition not supported by this runner: {cond!r}"
        if failed is not None and cond != "always()":
            log.append(("skipped after failure", step.get("name")))
            continue
        if "uses" in step:
            with_ = {k: sub(v, ctx) for k, v in (step.get("with") or {}).items()}
            log.append(("uses (not run)", step["uses"], with_))
            continue
        env = {k: sub(v, ctx) for k, v in (step.get("env") or {}).items()}
        if "pip install" in step["run"]:
            assert env.get("TV_ACTION_PATH") == str(ROOT) and '"$TV_ACTION_PATH"' in step["run"]
            log.append(("pip install of the action's checkout (already installed)", step.get("name")))
            continue
        assert step["shell"] == "bash"
        script = tmp / f"step{i}.sh"
        script.write_text(sub(step["run"], ctx))
        output = tmp / f"github_output_{i}"
        output.write_text("")
        full_env = {**os.environ, **added_env, **env,
                    "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
                    "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output), "GITHUB_ENV": str(env_file),
                    "GITHUB_WORKSPACE": str(workspace), "GITHUB_ACTION_PATH": str(ROOT), "RUNNER_TEMP": str(tmp),
                    "GITHUB_ACTIONS": "true", "CI": "true"}
        p = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                           env=full_env, capture_output=True, text=True, timeout=300)
        log.append((step.get("name"), p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
        if step.get("id"):
            ctx["steps"][step["id"]] = read_commands_file(output)
        added_env.update(read_commands_file(env_file))
        if p.returncode != 0:
            failed = p.returncode
    outputs = {k: sub(v["value"], ctx) for k, v in (action.get("outputs") or {}).items()}
    return {"exit": failed or 0, "summary": summary.read_text(), "outputs": outputs, "log": log}


def _budget(ws: Path, max_ms: float) -> str:
    (ws / "perf-budget.toml").write_text(f"max_step_time_ms = {max_ms}\nmax_idle_pct = 95\n")
    return "perf-budget.toml"


@pytest.fixture()
def ws(tmp_path):
    w = tmp_path / "workspace"
    (w / "traces").mkdir(parents=True)
    return w


def _scenario(ws: Path, name: str, s) -> str:
    write_kineto(s.ranks[0], ws / "traces" / name)
    return f"traces/{name}"


def _ranks(ws: Path, pair_side, stem: str) -> list[str]:
    names = []
    for rk in pair_side.ranks:
        p = ws / "traces" / f"{stem}_rank{rk.meta.rank}.json"
        write_kineto(rk, p)
        names.append(f"traces/{p.name}")
    return names


PAIRS = {p["name"]: p for p in regression_pairs()}


def test_action_within_budget_two_ranks_one_per_line(ws, tmp_path):
    s = PAIRS["straggler"]["new"]
    traces = _ranks(ws, s, "new")
    want_ns = s.expected["step_time_ns"]
    r = run_action({"traces": "\n".join(traces) + "\n", "budget": _budget(ws, 2 * want_ns / 1e6)}, ws, tmp_path)
    assert r["exit"] == 0, r["log"]
    assert r["outputs"]["status"] == "0" and r["outputs"]["compare-status"] == ""
    out = ws / "traceview-report"
    assert {"report.json", "report.md", "report.html", "charts"} <= {p.name for p in out.iterdir()}
    assert not (out / ".traces").exists()
    doc = json.loads((out / "report.json").read_text())
    assert doc["world_size"] == 2
    assert doc["summary"]["step_time_ns"] == pytest.approx(want_ns, abs=1)   # by construction of the scenario
    # the summary is the Markdown report (without chart links) with the budget met
    assert r["summary"] == (out / "summary.md").read_text()
    assert "Budget perf-budget.toml: all 2 threshold(s) met" in r["summary"].replace("**", "")
    assert "charts/" not in r["summary"]
    assert r["log"][-1][1] == 0 and "within budget" in r["log"][-1][2]
    assert ("uses (not run)", "actions/upload-artifact@v4",
            {"name": "traceview-report", "path": "traceview-report", "if-no-files-found": "ignore"}) in r["log"]


def test_action_budget_violated_exits_1_after_writing_everything(ws, tmp_path):
    s = PAIRS["straggler"]["base"]
    traces = _ranks(ws, s, "base")
    limit = 0.9 * s.expected["step_time_ns"] / 1e6
    r = run_action({"traces": " ".join(traces), "budget": _budget(ws, round(limit, 4)), "output-dir": "out/perf"},
                   ws, tmp_path)
    assert r["exit"] == 1
    assert r["outputs"]["status"] == "1"
    text = r["summary"].replace("**", "")
    assert "1 of 2 threshold(s) violated" in text and "step time" in text
    out = ws / "out" / "perf"
    assert (out / "report.html").exists() and json.loads((out / "report.json").read_text())["world_size"] == 2
    last = r["log"][-1]
    assert last[0] == "Exit by the budget" and last[1] == 1 and "budget violated" in last[2]


def test_action_with_a_baseline_trace_diff(ws, tmp_path):
    pair = PAIRS["a2a_exposed"]
    base = _scenario(ws, "base.json", pair["base"])
    new = _scenario(ws, "new.json", pair["new"])
    delta = pair["step_time_delta_ns"]
    assert delta > 0
    r = run_action({"traces": new, "baseline": base, "budget": _budget(ws, 1000), "diff-args": "--fail-if-slower 1"},
                   ws, tmp_path)
    # within budget, but slower than the baseline by more than 1 %: the diff's gate fails the last step
    assert r["exit"] == 1, r["log"]
    assert r["outputs"]["status"] == "0" and r["outputs"]["compare-status"] == "1"
    assert "slower than the baseline" in r["log"][-1][2]
    out = ws / "traceview-report"
    diff = json.loads((out / "diff.json").read_text())
    assert diff["base"]["step_time_ns"] == pytest.approx(pair["base"].expected["step_time_ns"], abs=1)
    assert diff["new"]["step_time_ns"] == pytest.approx(pair["new"].expected["step_time_ns"], abs=1)
    assert diff["delta"]["step_time_ns"] == pytest.approx(delta, abs=1)
    assert 100 * delta / pair["base"].expected["step_time_ns"] > 1
    assert (out / "diff.html").read_text().startswith("<!DOCTYPE html>")
    summary = r["summary"]
    head, tail = summary.split("## Compared with the baseline\n", 1)
    assert head.startswith((out / "summary.md").read_text())
    assert "Budget perf-budget.toml: all 2 threshold(s) met" in head.replace("**", "")
    assert tail.strip().startswith(f"### traceview diff: regression, {delta / 1e6:+,.3f} ms per step")


def test_action_with_baseline_reports(ws, tmp_path):
    """A folder of earlier reports: the summary gets the history with this run as the newest night."""
    from traceview.reports import json_report
    from traceview.runs import AnalyzeOptions, run_analyze
    pair = PAIRS["a2a_exposed"]
    base = _scenario(ws, "base.json", pair["base"])
    (ws / "earlier").mkdir()
    (ws / "earlier" / "report.json").write_text(json_report.render(run_analyze([str(ws / base)], AnalyzeOptions())))
    # the new trace is captured a day later (both scenarios use one clock offset)
    write_kineto(pair["new"].ranks[0], ws / "traces" / "new.json")
    t = json.loads((ws / "traces" / "new.json").read_text())
    t["baseTimeNanoseconds"] += 86_400 * 10 ** 9
    (ws / "traces" / "new.json").write_text(json.dumps(t))
    r = run_action({"traces": "traces/new.json", "baseline-report": "earlier"}, ws, tmp_path)
    assert r["exit"] == 0, r["log"]
    assert r["outputs"]["compare-status"] == "0"
    tail = r["summary"].split("## Compared with the baseline reports\n", 1)[1]
    assert "# traceview history" in tail and "2 night(s)" in tail
    b, n = pair["base"].expected["step_time_ns"], pair["new"].expected["step_time_ns"]
    assert f"step time {b / 1e6:,.3f} → {n / 1e6:,.3f} ms ({100 * (n - b) / b:+.1f} %)" in tail
    assert (ws / "traceview-report" / "history.html").exists()


def test_action_input_error_fails_at_once(ws, tmp_path):
    r = run_action({"traces": "traces/missing.json"}, ws, tmp_path)
    assert r["exit"] == 2
    assert r["summary"] == ""                 # nothing appended
    names = [e[1] if e[0] == "skipped after failure" else e[0] for e in r["log"]]
    assert "Job summary" in names and "Exit by the budget" in names
    analyze = next(e for e in r["log"] if e[0] == "Analyze the traces")
    assert "missing.json" in analyze[3] and "Traceback" not in analyze[3]
