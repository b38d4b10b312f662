"""A large export's numbered tables in the compressed catalog (parsers/nsys.py `numbered`): the
profile is the one temp tables give, the tables were compressed where large, and nothing of them
outlives the parse, whether it ends well or fails."""
from __future__ import annotations

import pytest
from helpers import TRACES

from traceview import duck
from traceview.errors import TraceError
from traceview.parsers import nsys

CORPUS = TRACES / "nsys"
# the corpus exports nsys reads (the others are refused: test_nsys_parser.REFUSED)
EXPORTS = ("h100_2gpu_train_a2a_2026.2.sqlite", "h100_2gpu_inference_2026.2.sqlite",
           "a100_cloverleaf_2024.5.sqlite", "a100_saxpy_mpi_2022.2.sqlite", "h200_nvfuser_2024.6.sqlite")
TABLES = ("gpu_activities", "cpu_ranges", "launches", "syncs", "meta")


def _parse_schemas() -> list[str]:
    con = duck.connect()
    try:
        return [r[0] for r in con.execute(
            "SELECT schema_name FROM duckdb_schemas() WHERE database_name = ? AND schema_name LIKE 'tv_parse_%'",
            [duck.STORE]).fetchall()]
    finally:
        con.close()


def _as_large(monkeypatch, min_rows: int) -> list[tuple[str, int, int]]:
    """Every export parsed as a large one, its numbered tables compressed from `min_rows` rows;
    returns the (table, rows, parts it was sorted in) of each numbered table made in the compressed
    catalog."""
    monkeypatch.setattr(nsys, "COMPRESS_MIN_BYTES", 0)
    monkeypatch.setattr(nsys, "COMPRESS_MIN_ROWS", min_rows)
    seen: list[tuple[str, int, int]] = []
    numbered = nsys._Reader.numbered

    def watched(self, name, sql, parts=None):
        numbered(self, name, sql, parts)
        table = self._rows_table(name)
        assert table.startswith(f"{duck.STORE}.tv_parse_")
        seen.append((table, self.db.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0], len(parts or [""])))
    monkeypatch.setattr(nsys._Reader, "numbered", watched)
    return seen


@pytest.mark.parametrize("name", EXPORTS)
def test_the_compressed_tables_give_the_profile_of_temp_tables(monkeypatch, name):
    path = CORPUS / name
    plain = nsys.read(path)
    seen = _as_large(monkeypatch, 1)
    compressed = nsys.read(path)
    # the GPU rows, the API calls and the NVTX ranges (none where the export has no NVTX ranges)
    assert {t.rsplit(".", 1)[1] for t, _, _ in seen} >= {"g_rows", "l0_rows"}
    if name == "h100_2gpu_train_a2a_2026.2.sqlite":   # two ranks with NVTX ranges: sorted one at a time
        assert [p for t, _, p in seen if t.endswith(".r0_rows")] == [2]
    for t in TABLES:
        assert getattr(compressed, t).equals(getattr(plain, t)), t
    assert compressed.warnings == plain.warnings
    assert _parse_schemas() == []


def test_large_tables_are_compressed_when_made(monkeypatch):
    """A numbered table of COMPRESS_MIN_ROWS rows or more is checkpointed as it is made, a smaller
    one is not: DuckDB's own count of the catalog's compressed blocks says which."""
    path = CORPUS / "h100_2gpu_train_a2a_2026.2.sqlite"
    seen = _as_large(monkeypatch, 3_000)   # the a2a export: 5,299 GPU rows, 7,466 calls, 19,118 ranges
    sizes: dict[str, tuple[int, int]] = {}
    numbered = nsys._Reader.numbered

    def sized(self, name, sql, parts=None):
        numbered(self, name, sql, parts)
        table = self._rows_table(name)
        schema, tbl = table.split(".")[1:]
        # the table's segments and whether each is persisted (compressed, checkpointed) or in memory
        got = self.db.execute(
            "SELECT count(*) FILTER (persistent), count(*) FROM pragma_storage_info(?)", [table]).fetchall()[0]
        sizes[tbl] = got
    monkeypatch.setattr(nsys._Reader, "numbered", sized)
    nsys.read(path)
    rows = {t.rsplit(".", 1)[1]: n for t, n, _ in seen}
    assert rows["g_rows"] >= 3_000 and rows["l0_rows"] >= 3_000
    for tbl, (persistent, segments) in sizes.items():
        assert segments > 0, tbl
        # checkpointed where large (every segment written out), in memory where not
        assert (persistent == segments) == (rows[tbl] >= 3_000), (tbl, rows[tbl], persistent, segments)
    assert _parse_schemas() == []


def test_a_failed_parse_leaves_no_compressed_tables(monkeypatch):
    _as_large(monkeypatch, 1)

    def fail(self):
        raise ValueError("the parse stops here")
    monkeypatch.setattr(nsys._Reader, "launches", fail)
    with pytest.raises(TraceError, match="the parse stops here"):
        nsys.read(CORPUS / "h100_2gpu_train_a2a_2026.2.sqlite")
    assert _parse_schemas() == []
