"""Every corpus report is byte-identical when its traces are read back from the store: once every
case is parsed and stored, every report rendered from the stored Parquet tables hashes as in
tests/golden/corpus_reports.sha256 (the diffs too: diff shares the store)."""
import corpus_reports as cr
import pytest

from traceview import executors
from traceview.store import Store


@pytest.mark.skipif(not cr.TRACES.exists(), reason="the shared corpus is not beside the checkout")
def test_every_corpus_report_is_unchanged_through_the_store(tmp_path):
    from traceview.errors import TraceError
    from traceview.load import load
    want = cr.read_manifest()
    root = tmp_path / "store"
    with executors.configured(executors.RunSettings(store=root, jobs=1)):
        for _, paths in cr.cases():          # parse and store every case (no analysis)
            try:
                load(paths)
            except TraceError:
                pass
    entries = list((root / "entries").iterdir())
    assert len(entries) >= 30 and Store(root).check() == []
    with executors.configured(executors.RunSettings(store=root, jobs=1)) as state:
        got = cr.render_all()                # every rank now read back from the Parquet store
    changed = sorted(n for n in want if got.get(n) != want[n])
    assert not changed, f"{len(changed)} reports changed: {changed[:12]}"
    assert state.stats["from_store"] >= 1 and state.stats["parsed"] == 0
