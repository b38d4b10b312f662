"""The diff package gives DiffOptions and diff_sides when asked for (PEP 562): importing
traceview.diff.families, which the FLOPs steps of every `analyze` read, no longer imports the diff
document and its decomposition."""
import subprocess
import sys


def test_families_alone_leaves_the_diff_document_unimported():
    code = ("import sys, traceview.diff.families; "
            "print(sorted(m for m in sys.modules if m.startswith('traceview.diff')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['traceview.diff', 'traceview.diff.families']"


def test_the_package_still_gives_its_names():
    from traceview import diff
    from traceview.diff import document
    assert diff.DiffOptions is document.DiffOptions and diff.diff_sides is document.diff_sides
    try:
        diff.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
