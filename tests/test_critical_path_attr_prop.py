"""critical_path._attr_columns against a per-row reference: the same tuples, and keys that are
equal exactly where the tuples are (0 for (None, None, None))."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from traceview.analysis import critical_path as cp

_row = st.tuples(st.sampled_from([None, 0, 1, 7]), st.sampled_from([None, "fwd", "bwd"]),
                 st.sampled_from([None, "attn", "a2a", "shared_expert"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_row, max_size=40), st.booleans(), st.integers(0, 40))
def test_attr_columns_match_the_rows(rows, coded, cut):
    cut = min(cut, len(rows))

    def col(i, typ):
        chunks = [pa.array([r[i] for r in part], typ) for part in (rows[:cut], rows[cut:])]
        out = pa.chunked_array(chunks, typ)
        return out.dictionary_encode() if coded and typ == pa.string() else out
    attr, key, of_key = cp._attr_columns(col(0, pa.int32()), col(1, pa.string()), col(2, pa.string()))
    assert attr == rows
    assert len(of_key) == len(set(rows)) and all(of_key[key[i]] is attr[i] for i in range(len(rows)))
    for i, a in enumerate(rows):
        assert (key[i] == 0) == (a == (None, None, None))
        for j, b in enumerate(rows):
            assert (key[i] == key[j]) == (a == b)
            if a == b:
                assert attr[i] is attr[j]
