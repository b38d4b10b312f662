-- step: comm_summary_rank
-- scope: rank
-- requires: comm_ops, comm_exposure, activity_attribution
-- produces: rank, kind, ops, count, bytes, total_ns, exposed_ns
-- comm_summary_rank: per rank and collective kind, the parts comm_summary sums over the ranks (on a
-- mapped job the workers count them, and the parent reads a few rows per rank instead of joining
-- every activity): the operations (distinct op_key: an op_key names a CPU range or an activity,
-- both of one rank, so the distinct counts of the ranks add up), activities, bytes and total time
-- of the communication inside the steps, and the exposed time (comm_exposure) of all of the
-- kind's activities. A kind with exposure but no activity inside the rank's steps has a row with
-- count 0 (another rank may have some: its exposure is the kind's too).
WITH exposed AS (
    SELECT c.rank, c.comm_kind, sum(s.exposed)::DOUBLE AS exposed_ns
    FROM comm_ops c JOIN comm_exposure s ON s.id = c.id GROUP BY c.rank, c.comm_kind
),
inside AS (
    SELECT o.rank, o.comm_kind, count(DISTINCT o.op_key) AS ops, count(*) AS count,
           sum(o.bytes)::BIGINT AS bytes, sum(o.end_ns - o.start_ns)::BIGINT AS total_ns
    FROM comm_ops o
    JOIN activity_attribution t ON t.id = o.id AND t.step IS NOT NULL
    GROUP BY o.rank, o.comm_kind
)
SELECT coalesce(i.rank, e.rank) AS rank, coalesce(i.comm_kind, e.comm_kind) AS kind,
       coalesce(i.ops, 0) AS ops, coalesce(i.count, 0) AS count, i.bytes,
       coalesce(i.total_ns, 0) AS total_ns, e.exposed_ns
FROM inside i FULL JOIN exposed e ON e.rank = i.rank AND e.comm_kind = i.comm_kind
