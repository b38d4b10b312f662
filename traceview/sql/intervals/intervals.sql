-- Interval algebra as table macros, kept apart from the domain steps (which call them). Each takes
-- the NAME of a table (or view) of intervals with columns grp (the partition key: any type, e.g.
-- a struct of rank and step), s, e (half-open [s, e); empty ones are ignored) and returns rows
-- (grp, s, e[, n]) in no particular order.
--
-- interval_segments(t): the elementary segments between consecutive boundaries of each
-- partition's intervals, with n = how many intervals cover the segment (0 for gaps inside the
-- partition's span).
CREATE OR REPLACE MACRO interval_segments(t) AS TABLE
WITH deltas AS (
    SELECT grp, s AS p, 1 AS d FROM query_table(t) WHERE e > s
    UNION ALL
    SELECT grp, e AS p, -1 AS d FROM query_table(t) WHERE e > s
),
points AS (SELECT grp, p, sum(d) AS d FROM deltas GROUP BY grp, p),
swept AS (
    SELECT grp, p AS s, lead(p) OVER (PARTITION BY grp ORDER BY p) AS e,
           sum(d) OVER (PARTITION BY grp ORDER BY p ROWS UNBOUNDED PRECEDING)::BIGINT AS n
    FROM points
)
SELECT grp, s, e, n FROM swept WHERE e IS NOT NULL;

-- interval_union(t): per partition, the maximal intervals covered by at least one input interval.
-- One sort, no sweep of boundaries: an interval begins an island where it starts after every
-- interval that starts before it has ended (its start past their largest end: touching intervals
-- stay together); an island is named by that start, which every interval of the island takes as the
-- latest island start at or before its own. Both windows frame by value (RANGE), so intervals that
-- start together get the same answers whatever their order among themselves. s and e are integers
-- (ns: `1 PRECEDING` is the previous start value).
CREATE OR REPLACE MACRO interval_union(t) AS TABLE
WITH reach AS (
    SELECT grp, s, e,
           max(e) OVER (PARTITION BY grp ORDER BY s RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
    FROM query_table(t) WHERE e > s
),
keyed AS (
    SELECT grp, e, max(CASE WHEN before IS NULL OR s > before THEN s END)
                       OVER (PARTITION BY grp ORDER BY s RANGE UNBOUNDED PRECEDING) AS island
    FROM reach
)
SELECT grp, island AS s, max(e) AS e FROM keyed GROUP BY grp, island;

-- interval_overlapping(t): the partitions in which two (non-empty) intervals overlap: one starts
-- before an earlier-starting one ends (touching intervals do not overlap). Where a partition is not
-- listed, a point lies in at most one interval: the latest starting at or before it (an ASOF join).
CREATE OR REPLACE MACRO interval_overlapping(t) AS TABLE
WITH ordered AS (
    SELECT grp, s < max(e) OVER (PARTITION BY grp ORDER BY s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS hit
    FROM query_table(t) WHERE e > s
)
SELECT DISTINCT grp FROM ordered WHERE hit;

-- interval_overlay(a, b): the elementary segments of a's and b's intervals together (one sweep),
-- with na, nb = how many intervals of a and of b cover each (gaps included: both 0).
CREATE OR REPLACE MACRO interval_overlay(a, b) AS TABLE
WITH deltas AS (
    SELECT grp, s AS p, 1 AS da, 0 AS db FROM query_table(a) WHERE e > s
    UNION ALL SELECT grp, e, -1, 0 FROM query_table(a) WHERE e > s
    UNION ALL SELECT grp, s, 0, 1 FROM query_table(b) WHERE e > s
    UNION ALL SELECT grp, e, 0, -1 FROM query_table(b) WHERE e > s
),
points AS (SELECT grp, p, sum(da) AS da, sum(db) AS db FROM deltas GROUP BY grp, p),
swept AS (
    SELECT grp, p AS s, lead(p) OVER (PARTITION BY grp ORDER BY p) AS e,
           sum(da) OVER (PARTITION BY grp ORDER BY p ROWS UNBOUNDED PRECEDING)::BIGINT AS na,
           sum(db) OVER (PARTITION BY grp ORDER BY p ROWS UNBOUNDED PRECEDING)::BIGINT AS nb
    FROM points
)
SELECT grp, s, e, na, nb FROM swept WHERE e IS NOT NULL;

-- interval_intersect(a, b): per partition, the maximal intervals covered by both a and b.
CREATE OR REPLACE MACRO interval_intersect(a, b) AS TABLE
WITH both_ AS (SELECT grp, s, e FROM interval_overlay(a, b) WHERE na > 0 AND nb > 0)
SELECT * FROM interval_union('both_');

-- interval_subtract(a, b): per partition, the maximal parts of a's union that b does not cover.
CREATE OR REPLACE MACRO interval_subtract(a, b) AS TABLE
WITH only_a AS (SELECT grp, s, e FROM interval_overlay(a, b) WHERE na > 0 AND nb = 0)
SELECT * FROM interval_union('only_a');
