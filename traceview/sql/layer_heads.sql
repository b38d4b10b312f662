-- step: layer_heads
-- scope: rank
-- requires: range_context_raw, cpu_ranges, step_ranges
-- produces: id, rank, step, tid, phase, pass, name, start_ns
-- layer_heads: the stage-naming annotations with no layer number (range_context.head = id), in
-- the order `layers.infer_blocks` reads them: per rank, step, thread, phase and pass (DeepSeek's
-- deferred weight-gradient `(W)` annotations form their own pass), by start time.
WITH h AS (
    SELECT c.id, c.rank, r.tid, r.start_ns, r.name,
           CASE WHEN c.anchor IS NOT NULL OR c.phase = 'backward' THEN 'backward'
                ELSE coalesce(c.phase, 'forward') END AS phase,
           CASE WHEN regexp_matches(r.name, '\(W\)$') THEN 'W' ELSE '' END AS pass
    FROM range_context_raw c JOIN cpu_ranges r ON r.id = c.id
    WHERE c.head = c.id
)
SELECT h.id, h.rank, coalesce(s.step, 0) AS step, h.tid, h.phase, h.pass, h.name, h.start_ns
FROM h LEFT JOIN step_ranges s ON s.rank = h.rank AND h.start_ns >= s.cpu_start_ns AND h.start_ns < s.cpu_end_ns
QUALIFY row_number() OVER (PARTITION BY h.id ORDER BY s.step NULLS LAST) = 1
ORDER BY h.rank, step, h.tid, h.phase, h.pass, h.start_ns, h.id
