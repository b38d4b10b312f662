-- step: diff_units
-- scope: rank
-- requires: activity_shares, activity_spans, activity_attribution, gpu_activities, activity_class, comm_ops
-- produces: rank, step, layer, phase, stage, region, name, class, comm_kind, compute_ns, exposed_comm_ns
-- produces: overlapped_comm_ns, exposed_memory_ns, idle_ns, busy_ns, count
-- diff_units: the shares of layer_times (activity_shares), unrounded, grouped additionally by
-- activity name (the diff groups names into kernel families), class and collective kind.
-- busy_ns: the activities' own time in the window; count: activities (an activity charged only
-- an idle gap counts in neither).
WITH dur AS (
    SELECT c.id, sum(c.e - c.s)::DOUBLE AS busy_ns FROM activity_spans c GROUP BY c.id
)
SELECT p.rank, p.step, t.layer, t.phase, t.stage, t.region, a.name, ac.class, co.comm_kind,
       sum(p.compute_ns)::DOUBLE AS compute_ns,
       sum(p.exposed_comm_ns)::DOUBLE AS exposed_comm_ns,
       sum(p.overlapped_comm_ns)::DOUBLE AS overlapped_comm_ns,
       sum(p.exposed_memory_ns)::DOUBLE AS exposed_memory_ns,
       sum(p.idle_ns)::DOUBLE AS idle_ns,
       sum(CASE WHEN p.idle_ns = 0 THEN coalesce(d.busy_ns, 0) ELSE 0 END)::DOUBLE AS busy_ns,
       count(DISTINCT CASE WHEN p.idle_ns = 0 THEN p.id END) AS count
FROM activity_shares p
JOIN activity_attribution t ON t.id = p.id
JOIN gpu_activities a ON a.id = p.id
JOIN activity_class ac ON ac.id = p.id
LEFT JOIN comm_ops co ON co.id = p.id
LEFT JOIN dur d ON d.id = p.id
GROUP BY ALL
