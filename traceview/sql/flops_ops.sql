-- step: flops_ops
-- scope: rank
-- requires: cpu_ranges, flops_shapes
-- produces: id, rank, tid, name, start_ns, end_ns, flops, dtype, counted
-- flops_ops: every CPU op that has a FLOP formula, with the FLOPs its recorded shapes give
-- (flops_shapes; null when the shapes are missing or not understood) and `counted`: it has FLOPs
-- and no enclosing range (parent chain, at most 512 up) has FLOPs itself. The OUTERMOST op with a
-- formula wins, so `aten::linear -> aten::matmul -> aten::mm` counts once, as the linear;
-- backward matmuls (`MmBackward0 -> aten::mm`) count as their `aten::mm`, the autograd node
-- having no formula.
WITH RECURSIVE ops AS (
    SELECT c.id, c.rank, c.tid, c.name, c.start_ns, c.end_ns, c.parent_id, s.flops, s.dtype
    FROM cpu_ranges c
    JOIN flops_shapes s
      ON s.rank = c.rank AND s.name = c.name
     AND s.input_dims = coalesce(c.input_dims, '')
     AND s.concrete_inputs = coalesce(c.concrete_inputs, '')
     AND s.input_types = coalesce(c.input_types, '')
),
has AS (SELECT id, parent_id FROM ops WHERE flops IS NOT NULL),
-- the parent links, materialized once: the recursive step joins them at every level (reading
-- cpu_ranges there scanned the whole Arrow table again per level)
par AS MATERIALIZED (SELECT id, parent_id FROM cpu_ranges WHERE parent_id IS NOT NULL),
up(op, anc, n) AS (
    SELECT id, parent_id, 0 FROM has WHERE parent_id IS NOT NULL
    UNION ALL
    SELECT up.op, c.parent_id, up.n + 1
    FROM up JOIN par c ON c.id = up.anc
    WHERE up.n < 512
),
nested AS (SELECT DISTINCT up.op AS id FROM up JOIN has ON has.id = up.anc)
SELECT id, rank, tid, name, start_ns, end_ns, flops, dtype,
       flops IS NOT NULL AND id NOT IN (SELECT id FROM nested) AS counted
FROM ops
ORDER BY id
