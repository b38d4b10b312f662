-- activity_attribution: (step, layer, phase, stage, region) of every GPU activity.
-- Forward work: the innermost annotations around its launch (range_context of its op).
-- Backward work: the forward op it differentiates, found through the backward node's
-- fwd_id (Kineto fwdbwd flow) or its autograd sequence number; that op's layer and stage
-- apply, unless the backward work carries its own annotations (e.g. DeepSeek `combine(B)`).
-- region: 'layer' (inside a layer), 'outside' (attributed, outside the layers: embedding,
-- output head, loss, optimizer...), 'unattributed' (backward work with no link to a forward op,
-- or work with no launching CPU op).
-- Input: activity_origin, cpu_ranges, range_context, step_ranges, windows.
WITH fwd_by_seq AS (
    SELECT r.rank, r.seq, r.id AS fwd_op
    FROM cpu_ranges r JOIN range_context c ON c.id = r.id
    WHERE r.seq IS NOT NULL AND r.kind = 'op' AND c.anchor IS NULL AND coalesce(c.phase, '') <> 'backward'
    QUALIFY row_number() OVER (PARTITION BY r.rank, r.seq ORDER BY coalesce(r.depth, 0), r.start_ns, r.id) = 1
),
base AS (
    SELECT o.id, o.rank, o.origin_start_ns, c.layer, c.stage, c.phase, c.anchor,
           coalesce(ar.fwd_id, fs.fwd_op) AS fwd_op
    FROM activity_origin o
    LEFT JOIN range_context c ON c.id = o.op_id
    LEFT JOIN cpu_ranges ar ON ar.id = c.anchor
    LEFT JOIN fwd_by_seq fs ON fs.rank = ar.rank AND fs.seq = ar.seq
),
joined AS (
    SELECT b.*, (b.anchor IS NOT NULL OR b.phase = 'backward') AS bwd,
           f.layer AS f_layer, f.stage AS f_stage
    FROM base b LEFT JOIN range_context f ON f.id = b.fwd_op
),
stepped AS (
    SELECT j.id, s.step
    FROM joined j JOIN step_ranges s
      ON s.rank = j.rank AND j.origin_start_ns >= s.cpu_start_ns AND j.origin_start_ns < s.cpu_end_ns
    QUALIFY row_number() OVER (PARTITION BY j.id ORDER BY s.step) = 1
)
SELECT j.id, j.rank,
       coalesce(st.step, CASE WHEN (SELECT count(*) FROM step_ranges) = 0 THEN 0 END) AS step,
       CASE WHEN j.bwd THEN coalesce(j.layer, j.f_layer) ELSE j.layer END AS layer,
       CASE WHEN j.bwd THEN 'backward'
            WHEN j.phase IS NOT NULL THEN j.phase
            WHEN j.layer IS NOT NULL THEN 'forward'
            ELSE 'other' END AS phase,
       coalesce(j.stage, CASE WHEN j.bwd THEN j.f_stage END,
                CASE WHEN coalesce(j.layer, CASE WHEN j.bwd THEN j.f_layer END) IS NOT NULL THEN 'other' END,
                'other') AS stage,
       CASE WHEN (CASE WHEN j.bwd THEN coalesce(j.layer, j.f_layer) ELSE j.layer END) IS NOT NULL THEN 'layer'
            WHEN j.bwd AND j.fwd_op IS NULL AND j.stage IS NULL THEN 'unattributed'
            WHEN j.anchor IS NULL AND j.phase IS NULL AND j.layer IS NULL AND j.stage IS NULL
                 AND j.fwd_op IS NULL AND NOT EXISTS (SELECT 1 FROM activity_origin x WHERE x.id = j.id AND x.op_id IS NOT NULL)
                 THEN 'unattributed'
            ELSE 'outside' END AS region,
       j.bwd AS is_backward,
       j.fwd_op IS NOT NULL AS linked
FROM joined j LEFT JOIN stepped st ON st.id = j.id
