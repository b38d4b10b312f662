-- step: step_windows
-- scope: rank
-- requires: step_ranges, gpu_activities, activity_origin
-- produces: rank, step, name, start_ns, end_ns, activities
-- threads: all
-- step_windows: the GPU window of each step: from the start of the first GPU activity
-- launched inside the step's CPU range (any thread of that rank) to the end of the last one.
-- The launches inside each step's CPU range: on a rank whose (non-empty) step ranges do not overlap,
-- the only range that can hold a launch is the latest one starting at or before it (one ASOF
-- lookup per launch); where they overlap, every range around it (the range join).
WITH ranges AS (SELECT rank, step, name, cpu_start_ns, cpu_end_ns FROM step_ranges WHERE cpu_end_ns > cpu_start_ns),
step_spans AS (SELECT rank AS grp, cpu_start_ns AS s, cpu_end_ns AS e FROM ranges),
overlapping AS (SELECT grp AS rank FROM interval_overlapping('step_spans')),
launched AS (SELECT id, rank, origin_start_ns FROM activity_origin WHERE origin_start_ns IS NOT NULL),
in_step AS (
    SELECT s.rank, s.step, s.name, o.id
    FROM launched o ASOF JOIN ranges s ON s.rank = o.rank AND o.origin_start_ns >= s.cpu_start_ns
    WHERE o.origin_start_ns < s.cpu_end_ns AND o.rank NOT IN (SELECT rank FROM overlapping)
    UNION ALL
    SELECT s.rank, s.step, s.name, o.id
    FROM launched o JOIN ranges s
      ON o.rank = s.rank AND o.origin_start_ns >= s.cpu_start_ns AND o.origin_start_ns < s.cpu_end_ns
    WHERE s.rank IN (SELECT rank FROM overlapping)
)
SELECT s.rank, s.step, s.name,
       min(a.start_ns) AS start_ns,
       max(a.end_ns)   AS end_ns,
       count(*)        AS activities
FROM in_step s
JOIN gpu_activities a ON a.id = s.id
GROUP BY s.rank, s.step, s.name
ORDER BY s.rank, s.step
