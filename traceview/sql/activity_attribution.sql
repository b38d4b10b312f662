-- step: activity_attribution
-- scope: rank
-- requires: cpu_ranges, range_context, step_ranges, activity_origin
-- produces: id, rank, step, layer, phase, stage, region, is_backward, linked, layer_inferred
-- produces: cross_thread, cross_ambiguous
-- threads: all
-- activity_attribution: (step, layer, phase, stage, region) of every GPU activity.
-- Forward work: the innermost annotations around its launch (range_context of its op).
-- Backward work: the forward op it differentiates, found through the backward node's
-- fwd_id (Kineto fwdbwd flow) or its autograd sequence number; that op's layer and stage
-- apply, unless the backward work carries its own annotations (e.g. DeepSeek `combine(B)`).
-- Cross-thread: work whose launching thread names no layer and no stage at the launch (and, for
-- backward work, whose forward link names none either) -- the autograd engine's, a comm or a
-- data-loader thread -- takes the innermost annotation naming a stage or layer that is open at
-- its launch on another thread that is a training thread of the process (the thread holding
-- the step ranges; with no step ranges, every thread with such annotations), when exactly one
-- such thread has one open then (several: ambiguous, not used).
-- The step of an activity is the step range around the launch; on a rank with no step ranges, 0 (its whole trace).
-- region: 'layer' (a layer number, named or inferred), 'layer_unknown' (a stage of a layer
-- but no layer number), 'outside' (attributed, in no layer-like annotation: embedding, output
-- head, loss, optimizer...), 'unattributed' (backward work with no link to a forward op and no
-- annotation, or work with no launching CPU op).
WITH anchored AS (   -- each activity's launching op's context, and its backward node (anchor)'s links
    SELECT o.id, o.rank, o.tid, o.origin_start_ns, o.op_id, c.layer, c.stage, c.phase, c.anchor,
           coalesce(c.layer_inferred, false) AS layer_inferred, ar.rank AS a_rank, ar.seq AS a_seq, ar.fwd_id AS a_fwd
    FROM activity_origin o
    LEFT JOIN range_context c ON c.id = o.op_id
    LEFT JOIN (SELECT id, rank, seq, fwd_id FROM cpu_ranges    -- (only the ranges that are some op's anchor)
               WHERE (seq IS NOT NULL OR fwd_id IS NOT NULL) AND id IN (SELECT anchor FROM range_context)) ar
           ON ar.id = c.anchor
),
-- the forward op of a backward node with no fwd_id: the first op with its sequence number, looked up
-- only for the (rank, seq) such nodes have (not for every op with a sequence number), outside
-- backward work (an op with no range_context row inherits no context: not backward)
seq_wanted AS (SELECT DISTINCT a_rank AS rank, a_seq AS seq FROM anchored WHERE a_fwd IS NULL AND a_seq IS NOT NULL),
fwd_by_seq AS (
    SELECT r.rank, r.seq, r.id AS fwd_op
    FROM cpu_ranges r LEFT JOIN range_context c ON c.id = r.id
    WHERE r.seq IS NOT NULL AND r.kind = 'op' AND c.anchor IS NULL AND coalesce(c.phase, '') <> 'backward'
      AND (r.rank, r.seq) IN (SELECT (rank, seq) FROM seq_wanted)
    QUALIFY row_number() OVER (PARTITION BY r.rank, r.seq ORDER BY coalesce(r.depth, 0), r.start_ns, r.id) = 1
),
base AS (
    SELECT a.id, a.rank, a.tid, a.origin_start_ns, a.op_id, a.layer, a.stage, a.phase, a.anchor, a.layer_inferred,
           coalesce(a.a_fwd, fs.fwd_op) AS fwd_op
    FROM anchored a
    LEFT JOIN fwd_by_seq fs ON fs.rank = a.a_rank AND fs.seq = a.a_seq
),
linked AS (
    SELECT b.*, (b.anchor IS NOT NULL OR b.phase = 'backward') AS bwd,
           f.layer AS f_layer, f.stage AS f_stage, coalesce(f.layer_inferred, false) AS f_inferred
    FROM base b LEFT JOIN range_context f ON f.id = b.fwd_op
),
training_threads AS (
    SELECT DISTINCT rank, tid FROM step_ranges
    UNION
    SELECT DISTINCT c.rank, c.tid FROM range_context c
    WHERE c.names_stage AND NOT EXISTS (SELECT 1 FROM step_ranges s WHERE s.rank = c.rank)
),
candidates AS (   -- annotations naming a stage or layer on the training threads
    SELECT c.id, c.rank, c.tid, r.start_ns, r.end_ns, coalesce(r.depth, 0) AS depth,
           c.layer, c.stage, c.phase, coalesce(c.layer_inferred, false) AS layer_inferred
    FROM range_context c
    JOIN training_threads t ON t.rank = c.rank AND t.tid = c.tid
    JOIN cpu_ranges r ON r.id = c.id
    WHERE r.kind <> 'op' AND (c.layer IS NOT NULL OR c.stage IS NOT NULL)
),
need AS (
    SELECT id, rank, tid, origin_start_ns FROM linked
    WHERE origin_start_ns IS NOT NULL AND layer IS NULL AND stage IS NULL
      AND NOT (bwd AND (f_layer IS NOT NULL OR f_stage IS NOT NULL))
),
candidate_spans AS (SELECT {'rank': rank, 'tid': tid} AS grp, start_ns AS s, end_ns AS e FROM candidates),
covered AS (      -- per training thread, the spans where some candidate is open (interval_union)
    SELECT u.grp.rank AS rank, u.grp.tid AS tid, u.s, u.e
    FROM interval_union('candidate_spans') u
),
need_on AS (      -- (activity, other training thread) where the launch falls in a covered span of that
                  -- thread: a sorted ASOF lookup that spares the range join below the other pairs
    SELECT n.id, n.rank, n.origin_start_ns, n.x_tid
    FROM (SELECT n.*, t.tid AS x_tid FROM need n JOIN training_threads t ON t.rank = n.rank AND t.tid <> n.tid) n
    ASOF JOIN covered c ON c.rank = n.rank AND c.tid = n.x_tid AND n.origin_start_ns >= c.s
    WHERE n.origin_start_ns < c.e
),
open_at AS (      -- per activity and training thread: the innermost candidate open at launch
    SELECT n.id, k.tid AS x_tid, k.id AS x_range, k.layer, k.stage, k.phase, k.layer_inferred
    FROM need_on n JOIN candidates k
      ON k.rank = n.rank AND k.tid = n.x_tid AND n.origin_start_ns >= k.start_ns AND n.origin_start_ns < k.end_ns
    QUALIFY row_number() OVER (PARTITION BY n.id, k.tid ORDER BY k.depth DESC, k.start_ns DESC, k.id) = 1
),
cross_thread AS (
    SELECT id, count(*) AS n_threads, any_value(x_range) AS x_range, any_value(layer) AS x_layer,
           any_value(stage) AS x_stage, any_value(phase) AS x_phase, bool_or(layer_inferred) AS x_inferred
    FROM open_at GROUP BY id
),
joined AS (
    SELECT l.*, x.n_threads,
           CASE WHEN x.n_threads = 1 THEN x.x_layer END AS x_layer,
           CASE WHEN x.n_threads = 1 THEN x.x_stage END AS x_stage,
           CASE WHEN x.n_threads = 1 THEN x.x_phase END AS x_phase,
           CASE WHEN x.n_threads = 1 THEN x.x_inferred ELSE false END AS x_inferred,
           x.n_threads = 1 AS cross
    FROM linked l LEFT JOIN cross_thread x ON x.id = l.id
),
resolved AS (
    SELECT j.*,
           (j.bwd OR coalesce(j.cross AND j.x_phase = 'backward', false)) AS is_bwd,
           coalesce(j.layer, CASE WHEN j.bwd THEN j.f_layer END, CASE WHEN j.cross THEN j.x_layer END) AS r_layer,
           coalesce(j.stage, CASE WHEN j.bwd THEN j.f_stage END, CASE WHEN j.cross THEN j.x_stage END) AS r_stage,
           CASE WHEN j.layer IS NOT NULL THEN j.layer_inferred
                WHEN j.bwd AND j.f_layer IS NOT NULL THEN j.f_inferred
                WHEN j.cross AND j.x_layer IS NOT NULL THEN j.x_inferred
                ELSE false END AS r_inferred
    FROM joined j
),
step_spans AS (SELECT rank, step, cpu_start_ns, cpu_end_ns FROM step_ranges WHERE cpu_end_ns > cpu_start_ns),
step_intervals AS (SELECT rank AS grp, cpu_start_ns AS s, cpu_end_ns AS e FROM step_spans),
overlapping AS (SELECT grp AS rank FROM interval_overlapping('step_intervals')),   -- the ranks needing the range join
stepped AS (      -- the step range around the launch (the lowest step where several are): on a rank
                  -- whose step ranges do not overlap, the latest one starting at or before it (ASOF)
    SELECT j.id, s.step
    FROM resolved j ASOF JOIN step_spans s ON s.rank = j.rank AND j.origin_start_ns >= s.cpu_start_ns
    WHERE j.origin_start_ns < s.cpu_end_ns AND j.rank NOT IN (SELECT rank FROM overlapping)
    UNION ALL
    SELECT j.id, s.step
    FROM resolved j JOIN step_spans s
      ON s.rank = j.rank AND j.origin_start_ns >= s.cpu_start_ns AND j.origin_start_ns < s.cpu_end_ns
    WHERE s.rank IN (SELECT rank FROM overlapping)
    QUALIFY row_number() OVER (PARTITION BY j.id ORDER BY s.step) = 1
)
SELECT j.id, j.rank,
       coalesce(st.step, CASE WHEN NOT EXISTS (SELECT 1 FROM step_ranges s WHERE s.rank = j.rank) THEN 0 END) AS step,
       j.r_layer AS layer,
       CASE WHEN j.is_bwd THEN 'backward'
            WHEN j.phase IS NOT NULL THEN j.phase
            WHEN coalesce(j.cross, false) AND j.x_phase IS NOT NULL THEN j.x_phase
            WHEN j.r_layer IS NOT NULL THEN 'forward'
            ELSE 'other' END AS phase,
       coalesce(j.r_stage, 'other') AS stage,
       CASE WHEN j.r_layer IS NOT NULL THEN 'layer'
            WHEN j.r_stage IS NOT NULL THEN 'layer_unknown'
            WHEN j.bwd AND j.fwd_op IS NULL THEN 'unattributed'
            WHEN j.op_id IS NULL AND j.anchor IS NULL AND j.phase IS NULL AND NOT coalesce(j.cross, false)
                 THEN 'unattributed'
            ELSE 'outside' END AS region,
       j.is_bwd AS is_backward,
       j.fwd_op IS NOT NULL AS linked,
       j.r_inferred AS layer_inferred,
       coalesce(j.cross, false) AS cross_thread,
       coalesce(j.n_threads > 1, false) AS cross_ambiguous
FROM resolved j LEFT JOIN stepped st ON st.id = j.id
ORDER BY j.id
