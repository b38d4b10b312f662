-- step: top_kernels
-- scope: job
-- requires: activity_class, windows
-- produces: name, class, kind, count, total_ns
-- top_kernels: every GPU activity name (with its class and kind) by total time inside the step
-- windows, over all ranks, longest first (the report lists the first --top of them).
SELECT c.name, c.class, c.kind, count(*) AS count, sum(c.end_ns - c.start_ns)::BIGINT AS total_ns
FROM activity_class c
JOIN windows w ON c.rank = w.rank AND c.start_ns >= w.start_ns AND c.end_ns <= w.end_ns
GROUP BY c.name, c.class, c.kind
ORDER BY total_ns DESC, c.name
