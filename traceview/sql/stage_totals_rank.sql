-- step: stage_totals_rank
-- scope: rank
-- requires: layer_times
-- produces: rank, stage, first_pos, step_time_ns, compute_ns, exposed_comm_ns, overlapped_comm_ns
-- produces: exposed_memory_ns, idle_ns, comm_ns
-- stage_totals_rank: per rank and stage, the sums of its layer rows (the parts the document's
-- per-stage totals add up over the ranks: on a mapped job the workers sum them, and the parent
-- reads a few rows per rank instead of every layer row), and first_pos: where the stage's first
-- row comes among the rank's rows in the report's order of layer rows (by step, layer with no
-- layer last, phase, stage, region; the report orders by rank first, so the job's first row of
-- a stage is the first_pos of its lowest rank).
SELECT rank, stage, min(pos) AS first_pos,
       sum(step_time_ns)::BIGINT AS step_time_ns, sum(compute_ns)::BIGINT AS compute_ns,
       sum(exposed_comm_ns)::BIGINT AS exposed_comm_ns, sum(overlapped_comm_ns)::BIGINT AS overlapped_comm_ns,
       sum(exposed_memory_ns)::BIGINT AS exposed_memory_ns, sum(idle_ns)::BIGINT AS idle_ns,
       sum(comm_ns)::BIGINT AS comm_ns
FROM (SELECT *, row_number() OVER (PARTITION BY rank ORDER BY step, layer NULLS LAST, phase, stage, region) AS pos
      FROM layer_times)
GROUP BY rank, stage
