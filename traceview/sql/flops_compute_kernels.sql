-- step: flops_compute_kernels
-- scope: rank
-- requires: flops_op_kernels, flops_op_precision
-- produces: id, rank, op_id, family, kind, precision, dur_ns, flops
-- flops_compute_kernels: the kernels of the counted ops of the steps (flops_op_precision), with
-- each op's FLOPs re-split over its compute kernels by duration (equally when they all last 0 ns);
-- an op without a compute kernel keeps all its kernels with their duration split. The op's kind
-- and precision go with its kernels.
WITH k AS (
    SELECT k.id, k.rank, k.op_id, k.family, k.dur_ns, k.flops, o.flops AS op_flops, o.kind, o.precision,
           k.category IS NOT NULL AS comp
    FROM flops_op_kernels k JOIN flops_op_precision o ON o.id = k.op_id
),
h AS (SELECT *, bool_or(comp) OVER (PARTITION BY op_id) AS has_comp FROM k),
f AS (
    SELECT *, sum(dur_ns) OVER (PARTITION BY op_id) AS csum, count(*) OVER (PARTITION BY op_id) AS cn
    FROM h WHERE comp OR NOT has_comp
)
SELECT id, rank, op_id, family, kind, precision, dur_ns,
       CASE WHEN NOT has_comp THEN flops
            WHEN csum > 0 THEN op_flops * dur_ns / csum
            ELSE op_flops / cn END AS flops
FROM f
ORDER BY id, op_id
