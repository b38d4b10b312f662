-- step: step_source
-- scope: job
-- requires: cpu_ranges, activity_origin
-- params: step_regexes
-- produces: regex_index, step_regex, ranks
-- step_source: which of the candidate step regexes ($step_regexes, tried in order) name step
-- ranges with GPU work: per regex (1-based regex_index), how many ranks have a CPU range
-- (annotation or op) whose name matches it and inside which a GPU activity was launched. The
-- analysis takes the first regex with ranks > 0 as the job's step rule (one rule for the job:
-- this is a per-job decision; the per-rank steps get it as their `step_regex` parameter).
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
launched AS (SELECT rank, origin_start_ns FROM activity_origin WHERE origin_start_ns IS NOT NULL),
with_work AS (
    SELECT DISTINCT h.regex_index, r.rank
    FROM (SELECT rank, name, start_ns, end_ns FROM cpu_ranges
          WHERE kind IN ('annotation', 'op') AND name IN (SELECT name FROM hits)) r   -- the few matched names
    JOIN hits h ON h.name = r.name
    ASOF JOIN launched o ON o.rank = r.rank AND r.start_ns <= o.origin_start_ns
    WHERE o.origin_start_ns < r.end_ns
)
SELECT rx.regex_index, rx.step_regex, count(w.rank) AS ranks
FROM rx LEFT JOIN with_work w ON w.regex_index = rx.regex_index
GROUP BY rx.regex_index, rx.step_regex
ORDER BY rx.regex_index
