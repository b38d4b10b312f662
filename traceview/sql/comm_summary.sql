-- step: comm_summary
-- scope: job
-- requires: comm_summary_rank
-- produces: kind, ops, count, bytes, total_ns, exposed_ns
-- comm_summary: communication in the steps by collective kind, over all ranks (the sums of
-- comm_summary_rank): operations (distinct op_key), activities, bytes, total and exposed time
-- (comm_exposure), longest first; a kind with no activity inside any step is left out.
SELECT kind, sum(ops)::BIGINT AS ops, sum(count)::BIGINT AS count, sum(bytes)::BIGINT AS bytes,
       sum(total_ns)::BIGINT AS total_ns, round(coalesce(sum(exposed_ns), 0))::BIGINT AS exposed_ns
FROM comm_summary_rank
GROUP BY kind HAVING sum(count) > 0
ORDER BY total_ns DESC
