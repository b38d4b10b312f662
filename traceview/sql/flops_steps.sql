-- step: flops_steps
-- scope: rank
-- requires: flops_step_ops
-- produces: rank, step, flops, ops
-- flops_steps: per rank and step, the FLOPs of its counted ops and how many there are.
SELECT rank, step, sum(flops) AS flops, count(*) AS ops
FROM flops_step_ops
GROUP BY rank, step
ORDER BY rank, step
