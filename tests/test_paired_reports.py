"""One scenario written as a Kineto JSON and as an nsys SQLite gives the same report (issue 3),
apart from the source metadata."""
import json

import pytest
from helpers import ROOT

from traceview.reports import json_report
from traceview.runs import AnalyzeOptions, run_analyze

GEN = ROOT / "fixtures" / "generated"


@pytest.mark.parametrize("name", ["tiny_breakdown", "moe_overlap_1rank", "hostile_names"])
def test_kineto_and_nsys_forms_give_identical_reports(name):
    k = json.loads(json_report.render(run_analyze([str(GEN / f"{name}.json")], AnalyzeOptions())))
    n = json.loads(json_report.render(run_analyze([str(GEN / f"{name}.sqlite")], AnalyzeOptions())))
    assert [i["format"] for i in k["inputs"]] == ["kineto"] and [i["format"] for i in n["inputs"]] == ["nsys"]
    for doc in (k, n):
        del doc["inputs"]
    # Two facts only the Kineto form records: collective message sizes (NCCL kernel args) and
    # operand dtypes (`Input type`); an nsys export has neither (emit_nvtx names carry shapes only).
    for ck, cn in zip(k["comm"], n["comm"], strict=True):
        assert cn["bytes"] in (None, ck["bytes"])
    assert n["flops"]["dtype_source"] in ("assumed", k["flops"]["dtype_source"])
    assert n["flops"]["dtype"] == k["flops"]["dtype"] == "bf16"
    # the precision split is the same; the Kineto form reads it from the inputs, the nsys form from the kernels
    kp, np_ = k["flops"].get("flops_by_precision", []), n["flops"].get("flops_by_precision", [])
    assert [r["precision"] for r in np_] == [r["precision"] for r in kp]
    assert {s for r in kp for s in r["sources"]} <= {"inputs"}
    assert {s for r in np_ for s in r["sources"]} <= {"kernel", "assumed"}
    assumed = "data type not known: bf16 assumed (--dtype)"
    for doc in (k, n):
        for r in doc["flops"].get("flops_by_precision", []):
            r.pop("sources")
        for c in doc["comm"]:
            c.pop("bytes")
        doc["flops"].pop("dtype_source")
        doc["flops"]["notes"] = [x for x in doc["flops"]["notes"] if x != assumed]
    assert k == n


def test_tiny_breakdown_numbers_by_hand():
    exp = json.loads((GEN / "tiny_breakdown.expected.json").read_text())
    doc = run_analyze([str(GEN / "tiny_breakdown.sqlite")], AnalyzeOptions())
    for e, got in zip(exp["steps"], doc["steps"], strict=True):
        assert got["step"] == e["step"]
        assert got["step_time_ns"] == e["window_ns"]
        for f in ("compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "exposed_memory_ns", "idle_ns", "comm_ns"):
            assert got[f] == e[f], f
