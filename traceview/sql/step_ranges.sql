-- step_ranges: the CPU ranges that name training steps, with their step number.
-- A range names a step when its name matches $step_regex; the first capture group, when it
-- is a number, is the step number; otherwise steps are numbered 1, 2, ... in time order.
-- Per rank, one range per step number (the outermost, earliest one if several match).
-- Input: cpu_ranges.
WITH m AS (
    SELECT rank, id, tid, start_ns, end_ns, name, depth,
           coalesce(
               try_cast(nullif(regexp_extract(name, $step_regex, 1), '') AS BIGINT),
               row_number() OVER (PARTITION BY rank ORDER BY start_ns, id)
           ) AS step
    FROM cpu_ranges
    WHERE kind IN ('annotation', 'op') AND regexp_matches(name, $step_regex)
)
SELECT rank, step, id AS range_id, tid, start_ns AS cpu_start_ns, end_ns AS cpu_end_ns, name
FROM m
WHERE step IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY rank, step ORDER BY coalesce(depth, 0), start_ns, id) = 1
