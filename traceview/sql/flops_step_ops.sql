-- step: flops_step_ops
-- scope: rank
-- requires: flops_ops, step_ranges
-- params: no_step_ranges
-- produces: rank, step, id, name, flops
-- flops_step_ops: the counted ops (flops_ops) of each step: those whose start lies in the step's
-- CPU range (step_ranges, the steps every other analysis uses; an op is in [cpu_start_ns,
-- cpu_end_ns) of its own rank). When the job has no step ranges at all ($no_step_ranges, decided
-- once for the job by the caller) the whole trace is one step, step 0.
SELECT o.rank, coalesce(s.step, 0)::BIGINT AS step, o.id, o.name, o.flops
FROM flops_ops o
LEFT JOIN step_ranges s
  ON NOT $no_step_ranges AND s.rank = o.rank
 AND o.start_ns >= s.cpu_start_ns AND o.start_ns < s.cpu_end_ns
WHERE o.counted AND ($no_step_ranges OR s.rank IS NOT NULL)
ORDER BY o.rank, step, o.id
