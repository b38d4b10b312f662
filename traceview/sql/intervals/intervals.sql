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
CREATE OR REPLACE MACRO interval_union(t) AS TABLE
WITH covered AS (SELECT grp, s, e FROM interval_segments(t) WHERE n > 0),
marked AS (
    SELECT grp, s, e,
           CASE WHEN lag(e) OVER (PARTITION BY grp ORDER BY s) = s THEN 0 ELSE 1 END AS starts
    FROM covered
),
islands AS (
    SELECT grp, s, e, sum(starts) OVER (PARTITION BY grp ORDER BY s ROWS UNBOUNDED PRECEDING) AS island
    FROM marked
)
SELECT grp, min(s) AS s, max(e) AS e FROM islands GROUP BY grp, island;

-- interval_intersect(a, b): per partition, the maximal intervals covered by both a and b.
CREATE OR REPLACE MACRO interval_intersect(a, b) AS TABLE
WITH ua AS (SELECT * FROM interval_union(a)), ub AS (SELECT * FROM interval_union(b))
SELECT ua.grp, greatest(ua.s, ub.s) AS s, least(ua.e, ub.e) AS e
FROM ua JOIN ub ON ua.grp = ub.grp AND ua.s < ub.e AND ub.s < ua.e;

-- interval_subtract(a, b): per partition, the maximal parts of a's union that b does not cover.
CREATE OR REPLACE MACRO interval_subtract(a, b) AS TABLE
WITH ua AS (SELECT * FROM interval_union(a)),
cut AS (SELECT * FROM interval_intersect(a, b)),
bounds AS (   -- each island of a, cut at the pieces b covers: gaps between consecutive cut points
    SELECT ua.grp, ua.s AS is_, ua.e AS ie, c.s AS cs, c.e AS ce
    FROM ua LEFT JOIN cut c ON c.grp = ua.grp AND c.s >= ua.s AND c.e <= ua.e
),
edges AS (
    SELECT grp, is_, ie, is_ AS p, 0 AS k FROM bounds
    UNION ALL SELECT grp, is_, ie, cs, 1 FROM bounds WHERE cs IS NOT NULL
    UNION ALL SELECT grp, is_, ie, ce, 2 FROM bounds WHERE ce IS NOT NULL
    UNION ALL SELECT grp, is_, ie, ie, 3 FROM bounds
),
ordered AS (
    SELECT DISTINCT grp, is_, ie, p, k FROM edges
),
pieces AS (
    SELECT grp, p AS s, lead(p) OVER (PARTITION BY grp, is_ ORDER BY p, k) AS e, k,
           lead(k) OVER (PARTITION BY grp, is_ ORDER BY p, k) AS k2
    FROM ordered
)
SELECT grp, s, e FROM pieces WHERE e IS NOT NULL AND e > s AND k IN (0, 2) AND k2 IN (1, 3);
