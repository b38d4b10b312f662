"""One `analyze` builds each step once and opens one DuckDB connection (the CLI's path: options
checked, rules loaded, trace loaded, every section, on h200_moe/overlap and the 8-rank DLRM job)."""
import inspect

import duckdb
import pytest
from helpers import TRACES

from traceview.engine import steps
from traceview.runs import AnalyzeOptions, run_job

CASES = {"h200_moe_overlap": [TRACES / "kineto" / "h200_moe" / "overlap.json.gz"],
         "dlrm_8rank": sorted((TRACES / "kineto" / "dlrm_8rank_v100").glob("*.json*"))}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_step_once_and_one_connection(case, monkeypatch):
    paths = CASES[case]
    if not paths or not all(p.exists() for p in paths):
        pytest.skip("the shared corpus is not beside the checkout")
    opened = []
    real = duckdb.connect

    def counting(*a, **k):
        opened.append(inspect.stack()[1].filename)
        return real(*a, **k)
    monkeypatch.setattr(duckdb, "connect", counting)
    doc, session = run_job([str(p) for p in paths], AnalyzeOptions())
    assert len(opened) == 1, opened
    assert doc["steps"] and doc["critical_path"]
    assert session.build_counts and set(session.build_counts.values()) == {1}, session.build_counts
    # what the report reads was built through the engine, each step once
    want = {"activity_origin", "activity_class", "step_source", "step_ranges", "windows", "segments",
            "activity_spans", "breakdown", "top_kernels", "range_context_raw", "layer_heads", "layer_blocks",
            "range_context", "activity_attribution", "activity_shares", "layer_times", "attribution_groups",
            "comm_ops", "comm_exposure", "comm_summary", "coll_instances", "cp_host_syncs"}
    assert want <= set(session.build_counts), want - set(session.build_counts)
    # cp_preds' SQL runs per chunk of ranks (critical_path.iter_paths): never materialized for all
    assert "cp_preds" not in session.build_counts
    assert set(session.build_counts) <= set(steps.all_steps())
