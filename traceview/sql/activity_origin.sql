-- step: activity_origin
-- scope: rank
-- requires: gpu_activities, launches, cpu_ranges
-- produces: id, rank, tid, origin_start_ns, origin_end_ns, op_id, launch_name
-- activity_origin: where each GPU activity came from on the CPU.
-- One row per GPU activity: the launching thread and the CPU interval of the launch call
-- (or, where no launch call is linked, of the launching op).
SELECT
    a.id,
    a.rank,
    coalesce(l.tid, o.tid)              AS tid,
    coalesce(l.start_ns, o.start_ns)    AS origin_start_ns,
    coalesce(l.end_ns, o.end_ns)        AS origin_end_ns,
    coalesce(l.op_id, a.op_id)          AS op_id,
    l.name                              AS launch_name
FROM gpu_activities a
LEFT JOIN launches l ON l.id = a.launch_id
LEFT JOIN (   -- the launching op's interval is read only where no launch call is linked
    SELECT id, tid, start_ns, end_ns FROM cpu_ranges
    WHERE id IN (SELECT g.op_id FROM gpu_activities g ANTI JOIN launches k ON k.id = g.launch_id)
) o ON o.id = a.op_id
