-- step: flops_kernels
-- scope: rank
-- requires: flops_ops, cpu_ranges, gpu_activities
-- produces: id, rank, op_id, flops
-- flops_kernels: the FLOPs of each GPU kernel (kind 'kernel') that a counted op (flops_ops) or
-- one of its descendants launched: the op's FLOPs split over its kernels in proportion to their
-- duration (equally when all last 0 ns). Copies and memsets get none; kernels no counted op
-- launched are absent. `op_id` is the counted op.
WITH RECURSIVE par AS MATERIALIZED (   -- the parent links, read once (not once per level of the walk)
    SELECT id, parent_id FROM cpu_ranges WHERE parent_id IS NOT NULL
),
up(act, anc, n) AS (
    SELECT id, op_id, 0 FROM gpu_activities WHERE op_id IS NOT NULL AND kind = 'kernel'
    UNION ALL
    SELECT up.act, c.parent_id, up.n + 1
    FROM up JOIN par c ON c.id = up.anc
    WHERE up.n < 512
),
k AS (
    SELECT g.id, g.rank, o.id AS op_id, o.flops, greatest(g.end_ns - g.start_ns, 0) AS dur
    FROM up
    JOIN flops_ops o ON o.id = up.anc AND o.counted
    JOIN gpu_activities g ON g.id = up.act
),
tot AS (SELECT op_id, sum(dur) AS s, count(*) AS n FROM k GROUP BY op_id)
SELECT k.id::BIGINT AS id, k.rank::INTEGER AS rank, k.op_id::BIGINT AS op_id,
       (CASE WHEN tot.s > 0 THEN k.flops * k.dur / tot.s ELSE k.flops / tot.n END)::DOUBLE AS flops
FROM k JOIN tot USING (op_id)
ORDER BY k.id
