-- step: activity_class
-- scope: rank
-- requires: cpu_ranges, gpu_activities, activity_origin
-- params: comm_kernel_regex, comm_op_regex
-- produces: id, rank, device, stream, start_ns, end_ns, class, coll_range
-- threads: all
-- activity_class: classify every GPU activity as compute, comm or memory.
-- comm:   launched inside a collective CPU range (name matches $comm_op_regex, or NVTX domain
--         'NCCL', or an MPI call: nsys's MPI trace, NVTX domain 'MPI' with ranges `MPI_*`, or
--         the range carries collective metadata), or the activity itself carries
--         collective metadata, or its name matches $comm_kernel_regex (NCCL/RCCL, DeepEP,
--         NVSHMEM, ...). A memcpy launched by c10d::alltoall_base_ is therefore comm.
-- memory: other memcpy / memset.
-- compute: every other kernel.
WITH op_rule AS (   -- the collective-op rule matched once per distinct range name
    SELECT name, regexp_matches(name, $comm_op_regex) AS coll FROM cpu_ranges GROUP BY name
),
coll_ranges AS (
    SELECT {'rank': rank, 'tid': tid} AS grp, start_ns AS s, end_ns AS e, r.name, r.id
    FROM cpu_ranges r LEFT JOIN op_rule k ON k.name = r.name
    WHERE k.coll
       OR (domain IS NOT NULL AND upper(domain) = 'NCCL')    -- (the case folded only where there is a domain)
       OR (domain IS NOT NULL AND upper(domain) = 'MPI' AND starts_with(r.name, 'MPI_'))
       OR coll_name IS NOT NULL
),
-- nested/overlapping collective ranges merged into disjoint islands per thread, so that one ASOF join
-- (latest island starting at or before the launch) finds the only candidate. In one sort (as
-- interval_union, intervals.sql): a range begins an island where it starts after every range that
-- starts before it has ended, and takes the latest island start at or before its own; a range that
-- starts with others gets their answers (both windows frame by value). An island is named by its
-- earliest range (of ranges starting together, the one with the lower id); an empty range lies in the
-- island around it (at most touching its end) and names it only by starting first; empty ranges in
-- no other make no island.
islands AS (
    SELECT grp.rank AS rank, grp.tid AS tid, island AS s, max(e) AS e, arg_min(name, (s, id)) AS name
    FROM (SELECT grp, s, e, name, id,
                 max(CASE WHEN before IS NULL OR s > before THEN s END)
                     OVER (PARTITION BY grp ORDER BY s RANGE UNBOUNDED PRECEDING) AS island
          FROM (SELECT *, max(e) OVER (PARTITION BY grp ORDER BY s
                                       RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
                FROM coll_ranges))
    GROUP BY grp, island
    HAVING max(e) > island
),
under_coll AS (
    SELECT o.id, i.name AS coll_range
    FROM activity_origin o
    ASOF JOIN islands i ON o.rank = i.rank AND o.tid = i.tid AND o.origin_start_ns >= i.s
    WHERE o.origin_end_ns <= i.e
),
-- the kernel-name rule matched once per distinct name (computed after the grouping, not as a filter
-- that the optimizer would push below it onto every activity's long name), joined by name
name_rule AS (
    SELECT name, regexp_matches(name, $comm_kernel_regex) AS comm FROM gpu_activities GROUP BY name
)
SELECT
    a.id, a.rank, a.device, a.stream, a.start_ns, a.end_ns,
    CASE
        WHEN u.id IS NOT NULL
          OR a.coll_name IS NOT NULL
          OR k.comm THEN 'comm'
        WHEN a.kind IN ('memcpy', 'memset') THEN 'memory'
        ELSE 'compute'
    END AS class,
    u.coll_range
FROM gpu_activities a
LEFT JOIN under_coll u ON u.id = a.id
LEFT JOIN name_rule k ON k.name = a.name
ORDER BY a.id
