-- step: flops_step_tokens
-- scope: rank
-- requires: flops_embedding_tokens, step_ranges
-- params: no_step_ranges
-- produces: rank, step, tokens
-- flops_step_tokens: tokens per step per rank, the tokens of the `aten::embedding` calls
-- (flops_embedding_tokens) whose start lies in the step's CPU range, summed. Without step ranges
-- ($no_step_ranges) one embedding call is taken as one step's batch: the rank's largest, as step 0.
SELECT e.rank, s.step, sum(e.tokens)::BIGINT AS tokens
FROM flops_embedding_tokens e
JOIN step_ranges s
  ON s.rank = e.rank AND e.start_ns >= s.cpu_start_ns AND e.start_ns < s.cpu_end_ns
WHERE NOT $no_step_ranges
GROUP BY e.rank, s.step
UNION ALL
SELECT rank, 0::BIGINT AS step, max(tokens)::BIGINT AS tokens
FROM flops_embedding_tokens
WHERE $no_step_ranges
GROUP BY rank
ORDER BY rank, step
