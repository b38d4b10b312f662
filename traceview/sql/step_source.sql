-- step: step_source
-- scope: job
-- requires: step_source_rank
-- params: step_regexes
-- produces: regex_index, step_regex, ranks
-- step_source: which of the candidate step regexes ($step_regexes, tried in order) name step
-- ranges with GPU work: per regex (1-based regex_index), how many ranks have a CPU range
-- (annotation or op) whose name matches it and inside which a GPU activity was launched
-- (step_source_rank's ranks). The analysis takes the first regex with ranks > 0 as the job's step
-- rule (one rule for the job: this is a per-job decision; the per-rank steps get it as their
-- `step_regex` parameter).
WITH rx AS (
    SELECT i AS regex_index, CAST($step_regexes AS VARCHAR[])[i] AS step_regex
    FROM range(1, len(CAST($step_regexes AS VARCHAR[])) + 1) t(i)
)
SELECT rx.regex_index, rx.step_regex, count(w.rank) AS ranks
FROM rx LEFT JOIN step_source_rank w ON w.regex_index = rx.regex_index
GROUP BY rx.regex_index, rx.step_regex
ORDER BY rx.regex_index
