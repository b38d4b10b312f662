-- step: top_kernels
-- scope: job
-- requires: top_kernels_rank
-- produces: name, class, kind, count, total_ns
-- top_kernels: every GPU activity name (with its class and kind) by total time inside the step
-- windows, over all ranks (the sums of top_kernels_rank), longest first (the report lists the
-- first --top of them).
SELECT name, class, kind, sum(count)::BIGINT AS count, sum(total_ns)::BIGINT AS total_ns
FROM top_kernels_rank
GROUP BY name, class, kind
ORDER BY total_ns DESC, name
