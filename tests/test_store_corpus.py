"""Every corpus report is byte-identical when its traces come through the store: the pass that
parses and writes the store, and the pass that reads every rank back from it (Parquet), both hash as
tests/golden/corpus_reports.sha256 (the diffs too: diff shares the store)."""
import pytest

import corpus_reports as cr
from traceview import executors
from traceview.store import Store


@pytest.mark.skipif(not cr.TRACES.exists(), reason="the shared corpus is not beside the checkout")
def test_every_corpus_report_is_unchanged_through_the_store(tmp_path):
    want = cr.read_manifest()
    root = tmp_path / "store"
    for attempt in ("writes the store", "reads the store"):
        with executors.configured(executors.RunSettings(store=root, jobs=1)):
            got = cr.render_all()
        changed = sorted(n for n in want if got.get(n) != want[n])
        assert not changed, f"{attempt}: {len(changed)} reports changed: {changed[:12]}"
    entries = list((root / "entries").iterdir())
    assert len(entries) >= 30 and Store(root).check() == []
