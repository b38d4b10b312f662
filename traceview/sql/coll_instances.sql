-- step: coll_instances
-- scope: rank
-- requires: comm_ops, gpu_activities, cpu_ranges, activity_attribution, activity_origin
-- produces: id, rank, comm_kind, grp, idx, arrival_ns, end_ns, bytes, stream, in_split, out_split
-- produces: group_size, step, layer, phase, stage
-- threads: all
-- coll_instances: every collective issued on every rank, numbered in issue order so that the
-- same collective can be matched across ranks: (comm_kind, grp, idx) names one collective of
-- the job. grp is the process group where the trace records it (coll_pg of the activity or of
-- its launching collective range), else '' (one communicator: order of issue decides).
-- One row per communication GPU activity (NCCL kernel, or the copy of a one-rank all-to-all);
-- issue order = launch time on the CPU, then GPU start.
-- arrival_ns is the GPU start (when this rank entered the collective), on the rank's own clock.
WITH base AS (
    SELECT c.id, c.rank, c.comm_kind, c.start_ns, c.end_ns, c.bytes, g.stream,
           coalesce(g.coll_pg, r.coll_pg, '') AS grp,
           coalesce(g.coll_in_split, r.coll_in_split) AS in_split,
           coalesce(g.coll_out_split, r.coll_out_split) AS out_split,
           coalesce(g.coll_group_size, r.coll_group_size) AS group_size,
           o.origin_start_ns
    FROM comm_ops c
    JOIN gpu_activities g ON g.id = c.id
    LEFT JOIN activity_origin o ON o.id = c.id
    LEFT JOIN cpu_ranges r ON r.id = o.op_id
)
SELECT b.id, b.rank, b.comm_kind, b.grp,
       (row_number() OVER (PARTITION BY b.rank, b.comm_kind, b.grp
                           ORDER BY coalesce(b.origin_start_ns, b.start_ns), b.start_ns, b.id) - 1)::BIGINT AS idx,
       b.start_ns AS arrival_ns, b.end_ns, b.bytes, b.stream, b.in_split, b.out_split, b.group_size,
       t.step, t.layer, t.phase, t.stage
FROM base b
LEFT JOIN activity_attribution t ON t.id = b.id
ORDER BY b.rank, b.comm_kind, b.grp, idx
