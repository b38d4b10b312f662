-- step: top_kernels_rank
-- scope: rank
-- requires: activity_class, windows, gpu_activities
-- produces: rank, name, class, kind, count, total_ns
-- top_kernels_rank: per rank, every GPU activity name (with its class and kind): how many ran
-- inside the rank's step windows and their total time (top_kernels sums these over the ranks: on a
-- mapped job the workers count, and the parent reads a few rows per rank, not every activity).
SELECT c.rank, g.name, c.class, g.kind, count(*) AS count, sum(c.end_ns - c.start_ns)::BIGINT AS total_ns
FROM activity_class c
JOIN windows w ON c.rank = w.rank AND c.start_ns >= w.start_ns AND c.end_ns <= w.end_ns
JOIN gpu_activities g ON g.id = c.id
GROUP BY c.rank, g.name, c.class, g.kind
