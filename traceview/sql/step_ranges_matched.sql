-- step: step_ranges_matched
-- scope: rank
-- requires: cpu_ranges
-- params: step_regex
-- produces: rank, n
-- step_ranges_matched: per rank, how many CPU ranges (annotation or op) match $step_regex, nested
-- and duplicate ones included (step_ranges keeps only the outermost: the difference is reported).
SELECT rank, count(*) AS n FROM cpu_ranges
WHERE kind IN ('annotation', 'op') AND regexp_matches(name, $step_regex) GROUP BY rank ORDER BY rank
