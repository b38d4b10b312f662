"""The DuckDB session over a loaded profile's canonical tables, and the named SQL queries.

Each `traceview/sql/<name>.sql` file holds one named query (or view definition). Queries take
parameters as DuckDB named parameters (`$name`), never by string formatting of trace text.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

import duckdb
import pyarrow as pa

from ..profile import Profile
from .. import schema


@lru_cache(maxsize=None)
def sql_text(name: str) -> str:
    return resources.files("traceview.sql").joinpath(f"{name}.sql").read_text()


class Session:
    """One DuckDB connection with the profile's tables registered under their canonical names."""

    def __init__(self, profile: Profile, threads: int = 1):
        self.profile = profile
        self.con = duckdb.connect(":memory:")
        # One thread by default: floating-point sums then run in one order, so the same input
        # gives byte-identical reports (and on traces of this size it is not slower: measured).
        self.con.execute(f"SET threads = {max(1, int(threads))}")
        for name in schema.TABLES:
            self.con.register(name, getattr(profile, name))
        self._views: set[str] = set()
        self._registered: set[str] = set()
        self.built: dict[str, dict] = {}          # step -> the parameters it was built with (engine/pipeline.py)
        self.build_counts: dict[str, int] = {}    # step -> times materialized (a test holds it at 1)

    def tables(self) -> set[str]:
        """Names queryable now: canonical tables, registered Arrow tables, materialized steps."""
        return set(schema.TABLES) | self._registered | self._views

    def columns(self, name: str) -> list[str]:
        return [r[0] for r in self.con.execute(f"DESCRIBE {name}").fetchall()]

    def materialize_sql(self, name: str, sql: str, params: dict) -> None:
        """Keep the result of a step's SQL inside DuckDB as temp table `name`."""
        self.create_table(name, sql, **params)

    def materialize_arrow(self, name: str, table: pa.Table) -> None:
        """Keep a Python step's Arrow result inside DuckDB as temp table `name`."""
        if name in self._registered:
            self.con.unregister(name)
            self._registered.discard(name)
        self.con.register("__step_result", table)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM __step_result")
        self.con.unregister("__step_result")
        self._views.add(name)

    def register(self, name: str, table: pa.Table) -> None:
        """Make an Arrow table queryable under `name` (replacing a table of that name)."""
        if name in self._views:
            self.con.execute(f"DROP TABLE IF EXISTS {name}")
            self._views.discard(name)
        self.con.register(name, table)
        self._registered.add(name)

    def params_sql(self, sql: str, params: dict | None) -> tuple[str, dict]:
        params = {k: v for k, v in (params or {}).items() if f"${k}" in sql}
        return sql, params

    def query(self, name: str, **params) -> pa.Table:
        """Run the named query file and return an Arrow table."""
        return self.sql(sql_text(name), **params)

    def sql(self, sql: str, **params) -> pa.Table:
        sql, params = self.params_sql(sql, params)
        return self.con.sql(sql, params=params or None).to_arrow_table()

    def materialize(self, name: str, **params) -> None:
        """Run the named query and keep its result inside DuckDB as a table of the same name."""
        sql, params = self.params_sql(sql_text(name), params)
        if name in self._registered:
            self.con.unregister(name)
            self._registered.discard(name)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}", params or None)
        self._views.add(name)

    def create_table(self, name: str, sql: str, **params) -> None:
        """Keep the result of `sql` inside DuckDB as table `name`."""
        sql, params = self.params_sql(sql, params)
        if name in self._registered:
            self.con.unregister(name)
            self._registered.discard(name)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}", params or None)
        self._views.add(name)

    def table(self, name: str) -> pa.Table:
        return self.con.sql(f"SELECT * FROM {name}").to_arrow_table()

    def rows(self, sql: str, **params) -> list[dict]:
        return self.sql(sql, **params).to_pylist()
