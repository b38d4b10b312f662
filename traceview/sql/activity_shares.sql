-- step: activity_shares
-- scope: rank
-- requires: segments, activity_spans
-- produces: id, rank, step, compute_ns, exposed_comm_ns, overlapped_comm_ns, exposed_memory_ns, idle_ns
-- activity_shares: each activity's share of each window's time, unrounded (layer_times groups them
-- by layer, phase and stage; the diff by kernel family as well).
-- Every elementary segment (see `segments`) is shared equally among the activities that run
-- in it and decide its class: compute segments among the compute kernels (comm running beside
-- them counts as overlapped comm of the comm activities), comm-only segments among the comm
-- activities, memory-only segments among memory ops. An idle segment is charged to the
-- activity that ends it (the next one to start), whose launch the GPU was waiting for: one more
-- row of that activity with idle_ns only.
WITH cover AS (
    SELECT rank, step, id, class, unnest(range(i0, i1)) AS seg FROM activity_spans
),
shares AS (
    SELECT v.id, v.rank, v.step,
           sum(CASE WHEN v.class = 'compute' AND s.c > 0 THEN (s.t_end - s.t) / s.c ELSE 0 END) AS compute_ns,
           sum(CASE WHEN v.class = 'comm' AND s.c = 0 THEN (s.t_end - s.t) / s.m ELSE 0 END) AS exposed_comm_ns,
           sum(CASE WHEN v.class = 'comm' AND s.c > 0 THEN (s.t_end - s.t) / s.m ELSE 0 END) AS overlapped_comm_ns,
           sum(CASE WHEN v.class = 'memory' AND s.c = 0 AND s.m = 0 THEN (s.t_end - s.t) / s.x ELSE 0 END)
               AS exposed_memory_ns,
           0::DOUBLE AS idle_ns
    FROM cover v JOIN segments s ON s.rank = v.rank AND s.step = v.step AND s.seg = v.seg
    GROUP BY v.id, v.rank, v.step
),
idle AS (   -- idle segments, charged to the activity (lowest id) that starts where the gap ends
    SELECT s.rank, s.step, arg_min(c.id, c.id) AS id, any_value(s.t_end - s.t)::DOUBLE AS idle_ns
    FROM segments s
    JOIN activity_spans c ON c.rank = s.rank AND c.step = s.step AND c.s = s.t_end
    WHERE s.t_end IS NOT NULL AND s.c = 0 AND s.m = 0 AND s.x = 0
    GROUP BY s.rank, s.step, s.t
)
SELECT id, rank, step, compute_ns, exposed_comm_ns, overlapped_comm_ns, exposed_memory_ns, idle_ns FROM shares
UNION ALL
SELECT id, rank, step, 0, 0, 0, 0, idle_ns FROM idle
