-- step: flops_op_kernels
-- scope: rank
-- requires: flops_kernels, gpu_activities, flops_kernel_info
-- produces: id, rank, op_id, name, family, category, kdtype, dur_ns, flops
-- flops_op_kernels: the kernels of the counted ops (flops_kernels) with their name, kernel family,
-- compute category (gemm / attention / conv, null for other kernels) and the math type their name
-- shows (flops_kernel_info), their duration and their duration-split share of the op's FLOPs.
SELECT k.id, k.rank, k.op_id, coalesce(g.name, '') AS name, i.family, i.category, i.kdtype,
       coalesce(greatest(g.end_ns - g.start_ns, 0), 0) AS dur_ns, k.flops
FROM flops_kernels k
LEFT JOIN gpu_activities g ON g.id = k.id
LEFT JOIN flops_kernel_info i ON i.rank = k.rank AND i.name = coalesce(g.name, '')
ORDER BY k.id
