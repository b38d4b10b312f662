-- step: step_source_rank
-- scope: rank
-- requires: cpu_ranges, activity_origin
-- params: step_regexes
-- produces: regex_index, rank
-- threads: all
-- step_source_rank: per candidate step regex ($step_regexes, 1-based regex_index), the ranks with
-- a CPU range (annotation or op) whose name matches it and inside which a GPU activity was
-- launched: what step_source counts over the job (on a mapped job the workers find them, while
-- placing the ranks, and the parent counts a few rows instead of scanning every rank's ranges
-- and launches).
-- Regexes are matched against the distinct range names only (a regex that is not a constant
-- is compiled per row).
WITH rx AS (
    SELECT i AS regex_index, CAST($step_regexes AS VARCHAR[])[i] AS step_regex
    FROM range(1, len(CAST($step_regexes AS VARCHAR[])) + 1) t(i)
),
names AS (SELECT DISTINCT name FROM cpu_ranges WHERE kind IN ('annotation', 'op')),
hits AS (SELECT n.name, rx.regex_index FROM names n JOIN rx ON regexp_matches(n.name, rx.step_regex)),
-- a range has GPU work when the first launch at or after its start (one ASOF lookup per range, not
-- a join of every range with every launch of its rank) falls before its end
launched AS (SELECT rank, origin_start_ns FROM activity_origin WHERE origin_start_ns IS NOT NULL)
SELECT DISTINCT h.regex_index, r.rank
FROM (SELECT rank, name, start_ns, end_ns FROM cpu_ranges
      WHERE kind IN ('annotation', 'op') AND name IN (SELECT name FROM hits)) r   -- the few matched names
JOIN hits h ON h.name = r.name
ASOF JOIN launched o ON o.rank = r.rank AND r.start_ns <= o.origin_start_ns
WHERE o.origin_start_ns < r.end_ns
ORDER BY h.regex_index, r.rank
