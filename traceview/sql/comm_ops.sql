-- comm_ops: every communication activity with its collective kind and size.
-- Kind from the collective's metadata where present (the activity's or its launching
-- collective range's `coll_name`), else from the name of the collective CPU range that
-- launched it (c10d::alltoall_base_, nccl:all_to_all, ncclAllReduce, ...), else from the
-- kernel name (ncclDevKernel_AllReduce..., DeepEP dispatch/combine -> all_to_all).
-- Bytes: memcpy bytes, else message elements x element size where recorded.
-- Input: activity_class, gpu_activities.
WITH src AS (
    SELECT c.id, c.rank, c.start_ns, c.end_ns, c.name, c.kind, g.bytes, g.coll_in_nelems, g.coll_dtype,
           lower(replace(coalesce(g.coll_name, ''), '_', '')) AS meta,
           lower(replace(coalesce(c.coll_range, ''), '_', '')) AS rng,
           lower(replace(c.name, '_', '')) AS kname
    FROM activity_class c JOIN gpu_activities g ON g.id = c.id
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
SELECT id, rank, start_ns, end_ns, name, comm_kind,
       coalesce(bytes, coll_in_nelems * CASE
           WHEN regexp_matches(lower(coalesce(coll_dtype, '')), 'double|float64|int64|long') THEN 8
           WHEN regexp_matches(lower(coalesce(coll_dtype, '')), 'float32|^float$|int32|^int$') THEN 4
           WHEN regexp_matches(lower(coalesce(coll_dtype, '')), 'bfloat16|half|float16|int16') THEN 2
           WHEN regexp_matches(lower(coalesce(coll_dtype, '')), 'int8|uint8|byte|char|bool|fp8|float8') THEN 1
           END) AS bytes
FROM kinds
