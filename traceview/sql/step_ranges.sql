-- step: step_ranges
-- scope: rank
-- requires: cpu_ranges
-- params: step_regex
-- produces: rank, step, range_id, tid, cpu_start_ns, cpu_end_ns, name
-- step_ranges: the CPU ranges that name training steps, with their step number.
-- A range names a step when its name matches $step_regex; the first capture group, when it
-- is a number, is the step number; otherwise steps are numbered 1, 2, ... in time order.
-- A matching range that lies inside another matching range of the same rank (nested, or a
-- duplicate of the same span) is not a step of its own: only the outermost is kept (for equal
-- spans the shallowest, then the first). Per rank, one range per step number (the outermost,
-- earliest one if several match). `step_ranges_dropped` counts what was left out.
WITH m0 AS (
    SELECT rank, id, tid, start_ns, end_ns, name, coalesce(depth, 0) AS depth
    FROM cpu_ranges
    WHERE kind IN ('annotation', 'op') AND regexp_matches(name, $step_regex)
),
inner_ranges AS (
    SELECT DISTINCT a.id
    FROM m0 a JOIN m0 b
      ON a.rank = b.rank AND a.id <> b.id AND b.start_ns <= a.start_ns AND a.end_ns <= b.end_ns
     AND (b.start_ns < a.start_ns OR a.end_ns < b.end_ns OR b.depth < a.depth OR (b.depth = a.depth AND b.id < a.id))
),
m AS (
    SELECT rank, id, tid, start_ns, end_ns, name, depth,
           coalesce(
               try_cast(nullif(regexp_extract(name, $step_regex, 1), '') AS BIGINT),
               row_number() OVER (PARTITION BY rank ORDER BY start_ns, id)
           ) AS step
    FROM m0
    WHERE id NOT IN (SELECT id FROM inner_ranges)
)
SELECT rank, step, id AS range_id, tid, start_ns AS cpu_start_ns, end_ns AS cpu_end_ns, name
FROM m
WHERE step IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY rank, step ORDER BY depth, start_ns, id) = 1
