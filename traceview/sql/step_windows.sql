-- step: step_windows
-- scope: rank
-- requires: step_ranges, gpu_activities, activity_origin
-- produces: rank, step, name, start_ns, end_ns, activities
-- step_windows: the GPU window of each step: from the start of the first GPU activity
-- launched inside the step's CPU range (any thread of that rank) to the end of the last one.
SELECT s.rank, s.step, s.name,
       min(a.start_ns) AS start_ns,
       max(a.end_ns)   AS end_ns,
       count(*)        AS activities
FROM step_ranges s
JOIN activity_origin o
  ON o.rank = s.rank AND o.origin_start_ns >= s.cpu_start_ns AND o.origin_start_ns < s.cpu_end_ns
JOIN gpu_activities a ON a.id = o.id
GROUP BY s.rank, s.step, s.name
ORDER BY s.rank, s.step
