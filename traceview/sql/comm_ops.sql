-- step: comm_ops
-- scope: rank
-- requires: activity_class, cpu_ranges, gpu_activities, activity_origin
-- produces: id, rank, start_ns, end_ns, name, comm_kind, bytes, op_key
-- threads: all
-- disabled_optimizers: build_side_probe_side
-- comm_ops: every communication activity with its collective kind and size.
-- Kind from the collective's metadata where present (the activity's or its launching
-- collective range's `coll_name`), else from the name of the collective CPU range that
-- launched it (c10d::alltoall_base_, nccl:all_to_all, ncclAllReduce, ...), else from the
-- kernel name (ncclDevKernel_AllReduce..., DeepEP dispatch/combine -> all_to_all).
-- Bytes: memcpy bytes, else message elements x element size where recorded.
-- op_key: the communication operation the activity belongs to (one collective, or one DeepEP
-- dispatch / combine, may run as several kernels): the outermost collective CPU range around
-- its launch (c10d::alltoall_base_, nccl:*, record_param_comms...); else, for an NCCL/RCCL
-- kernel, the kernel itself (each is one collective or group); else (DeepEP, NVSHMEM and other
-- libraries PyTorch records no op for) the innermost annotation around the launch, split by
-- role (dispatch / combine, from the kernel name); else the activity itself.
-- Every join builds its hash table on the side written on its right (the optimizer that picks the
-- side by estimated rows is off): the small side. DuckDB estimates the recursive walk at ~25M rows
-- (the a2a export x100: 6,400 comm activities walk to 32,000 rows), so it built the walk's range
-- lookup on all of cpu_ranges (1.9M ids, names and kinds) and each level of the walk on every parent
-- link: there the step's CPU 0.42 -> 0.17 s and the memory it adds while it runs +380 -> +120 MB.
WITH RECURSIVE par AS MATERIALIZED (   -- the parent links, read once (not once per level of the walk)
    SELECT id, parent_id FROM cpu_ranges WHERE parent_id IS NOT NULL
),
up AS (   -- the launching range of each comm activity and its ancestors
    SELECT c.id, o.op_id AS rid, 0 AS lvl
    FROM activity_origin o JOIN activity_class c ON c.id = o.id
    WHERE c.class = 'comm' AND o.op_id IS NOT NULL
    UNION ALL
    SELECT u.id, r.parent_id, u.lvl + 1
    FROM par r JOIN up u ON u.rid = r.id
),
chain AS (
    SELECT u.id, u.lvl, r.id AS rid, r.name, r.kind, c.coll_range
    FROM up u
    JOIN (SELECT id, name, kind FROM cpu_ranges WHERE id IN (SELECT rid FROM up)) r ON r.id = u.rid   -- the walk's ranges only
    JOIN (SELECT id, coll_range FROM activity_class WHERE class = 'comm') c ON c.id = u.id
),
coll_scope AS (
    SELECT id, arg_max(rid, lvl) AS rid FROM chain WHERE name = coll_range GROUP BY id
),
annot_scope AS (
    SELECT id, arg_min(rid, lvl) AS rid FROM chain WHERE kind <> 'op' GROUP BY id
),
src AS (
    SELECT c.id, c.rank, c.start_ns, c.end_ns, g.name, g.kind, g.bytes, g.coll_in_nelems, g.coll_dtype,
           lower(replace(coalesce(g.coll_name, ''), '_', '')) AS meta,
           lower(replace(coalesce(c.coll_range, ''), '_', '')) AS rng,
           lower(replace(g.name, '_', '')) AS kname
    FROM gpu_activities g JOIN activity_class c ON c.id = g.id
    WHERE c.class = 'comm'
),
kinds AS (
    SELECT *, CASE
        WHEN regexp_matches(meta || ' ' || rng, 'alltoall|a2a') THEN 'all_to_all'
        WHEN regexp_matches(meta || ' ' || rng, 'allreduce') THEN 'all_reduce'
        WHEN regexp_matches(meta || ' ' || rng, 'allgather') THEN 'all_gather'
        WHEN regexp_matches(meta || ' ' || rng, 'reducescatter') THEN 'reduce_scatter'
        WHEN regexp_matches(meta || ' ' || rng, 'broadcast') THEN 'broadcast'
        WHEN regexp_matches(meta || ' ' || rng, 'sendrecv|send|recv') THEN 'send_recv'
        WHEN regexp_matches(kname, 'dpsk::ep|deepep|alltoall') THEN 'all_to_all'
        WHEN regexp_matches(kname, 'allreduce|crossdevicereduce') THEN 'all_reduce'
        WHEN regexp_matches(kname, 'allgather') THEN 'all_gather'
        WHEN regexp_matches(kname, 'reducescatter') THEN 'reduce_scatter'
        WHEN regexp_matches(kname, 'broadcast') THEN 'broadcast'
        WHEN regexp_matches(kname, 'sendrecv|send|recv') THEN 'send_recv'
        ELSE 'other' END AS comm_kind
    FROM src
)
SELECT k.id, rank, start_ns, end_ns, name, comm_kind,
       coalesce(bytes, coll_in_nelems * CASE
           WHEN regexp_matches(lower(coalesce(coll_dtype, '')), 'double|float64|int64|long') THEN 8
           WHEN regexp_matches(lower(coalesce(coll_dtype, '')), 'float32|^float$|int32|^int$') THEN 4
           WHEN regexp_matches(lower(coalesce(coll_dtype, '')), 'bfloat16|half|float16|int16') THEN 2
           WHEN regexp_matches(lower(coalesce(coll_dtype, '')), 'int8|uint8|byte|char|bool|fp8|float8') THEN 1
           END) AS bytes,
       CASE WHEN cs.rid IS NOT NULL THEN 'c' || cs.rid
            WHEN regexp_matches(kname, 'nccl') THEN 'k' || k.id
            WHEN a.rid IS NOT NULL THEN 'a' || a.rid || CASE WHEN regexp_matches(kname, 'combine') THEN ':combine'
                                                          WHEN regexp_matches(kname, 'dispatch') THEN ':dispatch'
                                                          ELSE '' END
            ELSE 'k' || k.id END AS op_key
FROM kinds k
LEFT JOIN coll_scope cs ON cs.id = k.id
LEFT JOIN annot_scope a ON a.id = k.id
ORDER BY k.id
