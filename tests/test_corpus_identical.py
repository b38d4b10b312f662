"""Refactors keep every report byte-identical: each corpus case in every format (and three diffs)
hashes as in tests/golden/corpus_reports.sha256, made before the refactor. A number changed on purpose
regenerates the manifest (TRACEVIEW_REGOLD=1) in a commit that says which and why; the numbers
themselves are checked by the other tests (this is a snapshot, not a proof)."""
import os

import corpus_reports as cr
import pytest


@pytest.mark.skipif(not cr.TRACES.exists(), reason="the shared corpus is not beside the checkout")
def test_every_corpus_report_is_unchanged():
    got = cr.render_all()
    if os.environ.get("TRACEVIEW_REGOLD"):
        cr.write_manifest(got)
    want = cr.read_manifest()
    assert sorted(got) == sorted(want), "the set of corpus cases changed"
    changed = sorted(n for n in want if got[n] != want[n])
    assert not changed, f"{len(changed)} reports changed: {changed[:12]}"
