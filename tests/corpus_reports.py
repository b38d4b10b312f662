"""Every corpus case rendered in every format: the byte-identity check of refactors.

`python tests/corpus_reports.py DIR` writes each report into DIR and a manifest (sha256 per file);
tests/test_corpus_identical.py renders the same cases and compares with the committed manifest
(tests/golden/corpus_reports.sha256). A change of a number on purpose regenerates the manifest
(TRACEVIEW_REGOLD=1) in the commit that says why."""
from __future__ import annotations

import contextlib
import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BESIDE = HERE.parent.parent          # the folder holding the checkout and ../shared
TRACES = BESIDE / "shared" / "traces"
MANIFEST = HERE / "golden" / "corpus_reports.sha256"
FORMATS = ("json", "markdown", "text", "html")


def cases() -> list[tuple[str, list[Path]]]:
    """(case name, the paths of one job): each Kineto file alone, the 8-rank DLRM job whole, each nsys export."""
    out = []
    for p in sorted((TRACES / "kineto").glob("*/*.json*")):
        if p.parent.name == "dlrm_8rank_v100":
            continue
        out.append((f"kineto/{p.parent.name}/{p.name}", [p]))
    dlrm = sorted((TRACES / "kineto" / "dlrm_8rank_v100").glob("*.json*"))
    if dlrm:
        out.append(("kineto/dlrm_8rank_v100", dlrm))
    for p in sorted((TRACES / "nsys").glob("*.sqlite")):
        out.append((f"nsys/{p.name}", [p]))
    return out


DIFFS = (("kineto/h200_moe/blocking.json.gz", "kineto/h200_moe/overlap.json.gz"),
         ("nsys/h100_2gpu_inference_2026.2.sqlite", "nsys/h100_2gpu_train_a2a_2026.2.sqlite"),
         ("kineto/hta_trace_compare_base/base.json.gz", "kineto/hta_trace_compare_test/test.json.gz"))


def render_all(dump: Path | None = None) -> dict[str, str]:
    """file name -> sha256 of each report (a refused input records its one-line error instead);
    with `dump`, each report is also written there (to diff against another commit's).

    Warnings and errors name the input as given, so the cases are run from the folder beside the
    checkout with paths `shared/traces/...`: the same text wherever the checkout lies (CI clones
    it elsewhere than /work, and the text renderer wraps a warning by its length)."""
    with contextlib.chdir(BESIDE):
        return _render_all(dump)


def _rel(p: Path) -> str:
    return str(p.relative_to(BESIDE))


def _render_all(dump: Path | None) -> dict[str, str]:
    from traceview.errors import TraceError
    from traceview.reports import render, render_diff
    from traceview.runs import AnalyzeOptions, run_analyze
    out: dict[str, str] = {}
    for name, paths in cases():
        try:
            doc = run_analyze([_rel(p) for p in paths], AnalyzeOptions())
        except TraceError as e:
            out[f"{name}.error"] = _keep(dump, f"{name}.error", str(e))
            continue
        for fmt in FORMATS:
            out[f"{name}.{fmt}"] = _keep(dump, f"{name}.{fmt}", render(doc, fmt))
    from traceview.runs import DiffOptions, run_diff
    for a, b in DIFFS:
        if not (TRACES / a).exists() or not (TRACES / b).exists():
            continue
        doc = run_diff([_rel(TRACES / a)], [_rel(TRACES / b)], DiffOptions())
        for fmt in FORMATS:
            out[f"diff/{a}..{b}.{fmt}"] = _keep(dump, f"diff/{a}..{b}.{fmt}", render_diff(doc, fmt))
    return out


def _keep(dump: Path | None, name: str, text: str | bytes) -> str:
    if dump is not None:
        f = dump / name.replace("/", "__")
        f.write_bytes(text.encode() if isinstance(text, str) else text)
    return _sha(text)


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def read_manifest(path: Path = MANIFEST) -> dict[str, str]:
    return dict(line.split("  ", 1)[::-1] for line in path.read_text().splitlines() if line)


def write_manifest(sums: dict[str, str], path: Path = MANIFEST) -> None:
    path.write_text("".join(f"{h}  {n}\n" for n, h in sorted(sums.items())))


if __name__ == "__main__":
    # python tests/corpus_reports.py [MANIFEST [DUMP_DIR]]
    dump_dir = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else None
    if dump_dir is not None:
        dump_dir.mkdir(parents=True, exist_ok=True)
    write_manifest(render_all(dump_dir), Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else MANIFEST)
