-- step: comm_summary
-- scope: job
-- requires: comm_ops, comm_exposure, activity_attribution
-- produces: kind, ops, count, bytes, total_ns, exposed_ns
-- comm_summary: communication in the steps by collective kind, over all ranks: operations
-- (distinct op_key), activities, bytes, total and exposed time (comm_exposure), longest first.
WITH exposed AS (
    SELECT c.comm_kind, sum(s.exposed)::DOUBLE AS exposed_ns
    FROM comm_ops c JOIN comm_exposure s ON s.id = c.id GROUP BY c.comm_kind
)
SELECT o.comm_kind AS kind, count(DISTINCT o.op_key) AS ops, count(*) AS count, sum(o.bytes)::BIGINT AS bytes,
       sum(o.end_ns - o.start_ns)::BIGINT AS total_ns,
       round(coalesce(any_value(e.exposed_ns), 0))::BIGINT AS exposed_ns
FROM comm_ops o
JOIN activity_attribution t ON t.id = o.id AND t.step IS NOT NULL
LEFT JOIN exposed e ON e.comm_kind = o.comm_kind
GROUP BY o.comm_kind ORDER BY total_ns DESC
