-- step: flops_groups
-- scope: job
-- requires: flops_kernels, activity_attribution
-- produces: layer, phase, stage, flops
-- flops_groups: the kernel FLOPs (flops_kernels) of each (layer, phase, stage) that the
-- attribution gives their kernels, over all ranks and steps (kernels outside every step left out).
SELECT a.layer, a.phase, a.stage, sum(k.flops ORDER BY k.id) AS flops
FROM activity_attribution a
JOIN flops_kernels k USING (id)
WHERE a.step IS NOT NULL
GROUP BY a.layer, a.phase, a.stage
ORDER BY a.layer NULLS LAST, a.phase, a.stage
