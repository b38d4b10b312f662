-- step: flops_steps
-- scope: rank
-- requires: flops_step_ops
-- produces: rank, step, flops, ops
-- flops_steps: per rank and step, the FLOPs of its counted ops and how many there are (summed in
-- id order: the same float whatever order the rows come in).
SELECT rank, step, sum(flops ORDER BY id) AS flops, count(*) AS ops
FROM flops_step_ops
GROUP BY rank, step
ORDER BY rank, step
