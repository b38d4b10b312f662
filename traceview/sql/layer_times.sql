-- step: layer_times
-- scope: rank
-- requires: activity_shares, activity_attribution
-- produces: rank, step, layer, phase, stage, region, layer_inferred, compute_ns, exposed_comm_ns
-- produces: overlapped_comm_ns, exposed_memory_ns, idle_ns, comm_ns, step_time_ns, activities
-- layer_times: each window's time split over (layer, phase, stage, region): the activities'
-- shares (activity_shares) summed per group and rounded.
-- The parts of all groups add up to the step window (up to rounding of the shares).
-- layer_inferred: the group's layer number was inferred from repeating annotation blocks.
SELECT p.rank, p.step, t.layer, t.phase, t.stage, t.region, bool_or(t.layer_inferred) AS layer_inferred,
       round(sum(p.compute_ns))::BIGINT AS compute_ns,
       round(sum(p.exposed_comm_ns))::BIGINT AS exposed_comm_ns,
       round(sum(p.overlapped_comm_ns))::BIGINT AS overlapped_comm_ns,
       round(sum(p.exposed_memory_ns))::BIGINT AS exposed_memory_ns,
       round(sum(p.idle_ns))::BIGINT AS idle_ns,
       round(sum(p.exposed_comm_ns + p.overlapped_comm_ns))::BIGINT AS comm_ns,
       round(sum(p.compute_ns + p.exposed_comm_ns + p.exposed_memory_ns + p.idle_ns))::BIGINT AS step_time_ns,
       count(DISTINCT p.id) AS activities
FROM activity_shares p JOIN activity_attribution t ON t.id = p.id
GROUP BY p.rank, p.step, t.layer, t.phase, t.stage, t.region
ORDER BY p.rank, p.step, t.layer NULLS LAST, t.phase, t.stage, t.region
