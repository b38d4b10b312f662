-- step: whole_windows
-- scope: rank
-- requires: gpu_activities
-- produces: rank, step, name, start_ns, end_ns, activities
-- whole_windows: one window per rank covering all its GPU activity (used when no step ranges exist).
SELECT rank, 0::BIGINT AS step, 'whole trace' AS name,
       min(start_ns) AS start_ns, max(end_ns) AS end_ns, count(*) AS activities
FROM gpu_activities
GROUP BY rank
ORDER BY rank
