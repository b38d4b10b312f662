-- activity_class: classify every GPU activity as compute, comm or memory.
-- comm:   launched inside a collective CPU range (name matches $comm_op_regex, or NVTX domain
--         'NCCL', or the range carries collective metadata), or the activity itself carries
--         collective metadata, or its name matches $comm_kernel_regex (NCCL/RCCL, DeepEP,
--         NVSHMEM, ...). A memcpy launched by c10d::alltoall_base_ is therefore comm.
-- memory: other memcpy / memset.
-- compute: every other kernel.
-- Input: gpu_activities, activity_origin, cpu_ranges.
WITH coll_ranges AS (
    SELECT rank, tid, start_ns, end_ns, name
    FROM cpu_ranges
    WHERE regexp_matches(name, $comm_op_regex)
       OR upper(coalesce(domain, '')) = 'NCCL'
       OR coll_name IS NOT NULL
),
under_coll AS (
    SELECT o.id, min(c.name) AS coll_range
    FROM activity_origin o
    JOIN coll_ranges c
      ON c.rank = o.rank AND c.tid = o.tid
     AND c.start_ns <= o.origin_start_ns AND o.origin_end_ns <= c.end_ns
    GROUP BY o.id
)
SELECT
    a.id, a.rank, a.device, a.stream, a.start_ns, a.end_ns, a.kind, a.name,
    CASE
        WHEN u.id IS NOT NULL
          OR a.coll_name IS NOT NULL
          OR regexp_matches(a.name, $comm_kernel_regex) THEN 'comm'
        WHEN a.kind IN ('memcpy', 'memset') THEN 'memory'
        ELSE 'compute'
    END AS class,
    u.coll_range
FROM gpu_activities a
LEFT JOIN under_coll u ON u.id = a.id
