"""The shipped JSON Schema of traceview.report/1 (and of traceview.diff/1), and deterministic JSON."""
from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from importlib import resources

import jsonschema
import pytest
from helpers import ROOT
from reports_support import GEN, analyze, corpus, schema, validate, with_issue6

CORPUS = [
    ("kineto", "h200_moe", "overlap.json.gz"),
    ("kineto", "dlrm_8rank_v100"),
    ("kineto", "hta_nccl_parser_config", "nccl_data.json.gz"),
    ("nsys", "h100_2gpu_train_a2a_2026.2.sqlite"),
]


def test_schema_is_valid_draft_2020_12():
    s = schema()
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(s)
    # shipped as package data, next to the code that writes the document
    assert resources.files("traceview.data").joinpath("report.schema.json").is_file()


@pytest.mark.parametrize("parts", CORPUS, ids=lambda p: "/".join(p))
def test_corpus_reports_validate(parts):
    doc = analyze(corpus(*parts))          # analyze() validates
    assert doc["schema"] == "traceview.report/1"


@pytest.mark.parametrize("name", ["tiny_breakdown.json", "moe_overlap_1rank.json", "hostile_names.json",
                                  "straggler_4rank", "moe_overlap_1rank.sqlite"])
def test_fixture_reports_validate_with_optional_sections(name, tmp_path):
    doc = with_issue6(analyze(GEN / name))
    from traceview import budget
    (tmp_path / "b.toml").write_text("max_idle_pct = 1\n[per_rank]\nmax_step_time_ms = 1000\n")
    budget.apply(doc, tmp_path / "b.toml")
    validate(doc)


@pytest.mark.parametrize("mutate,where", [
    (lambda d: d.pop("summary"), "summary"),
    (lambda d: d["per_rank"][0].update(step_time_ns="300"), "step_time_ns"),
    (lambda d: d.update(surprise=1), "surprise"),
    (lambda d: d["inputs"][0].update(file="/home/me/trace.json"), "file"),
    (lambda d: d.update(schema="traceview.report/2"), "schema"),
    (lambda d: d["steps"][0].pop("start_ns"), "start_ns"),
    (lambda d: d.update(budget={"file": "b.toml", "violations": [{"metric": "max_fun"}], "checked": []}), "metric"),
])
def test_schema_rejects_broken_documents(mutate, where):
    doc = copy.deepcopy(analyze(GEN / "tiny_breakdown.json"))
    mutate(doc)
    with pytest.raises(jsonschema.ValidationError) as e:
        validate(doc)
    assert where in str(e.value)


def test_diff_document_validates_against_its_schema():
    from traceview import runs as document
    if not resources.files("traceview.data").joinpath("diff.schema.json").is_file():
        pytest.skip("traceview/data/diff.schema.json not in the tree yet (issue 7)")
    doc = document.run_diff([str(corpus("kineto", "h200_moe", "blocking.json.gz"))],
                            [str(corpus("kineto", "h200_moe", "overlap.json.gz"))])
    validate(doc)


def tv(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, cwd=cwd,
                          timeout=300)


def test_json_is_byte_identical_and_has_no_absolute_paths(tmp_path):
    """Same input, two runs, two working directories, absolute vs relative path: the same bytes."""
    src = corpus("kineto", "dlrm_8rank_v100")
    here = tmp_path / "a" / "ranks"
    shutil.copytree(src, here)
    one = tv("analyze", here, "-f", "json")
    two = tv("analyze", "ranks", "-f", "json", cwd=tmp_path / "a")
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert one.stdout == two.stdout
    text = one.stdout.decode()
    assert str(tmp_path) not in text and str(ROOT) not in text and "/tmp/" not in text
    import json

    def keys(v):
        if isinstance(v, dict):
            for k, x in v.items():
                yield k
                yield from keys(x)
        elif isinstance(v, list):
            for x in v:
                yield from keys(x)
    assert not {k for k in keys(json.loads(text)) if k in ("generated", "timestamp", "created", "date", "now")}
