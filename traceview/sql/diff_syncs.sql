-- step: diff_syncs
-- scope: rank
-- requires: syncs, launches, range_context, cpu_ranges, step_ranges
-- produces: rank, step, kind, n, dur_ns, layer, phase, stage, op
-- diff_syncs: host synchronizations (stream, context and event syncs) per step and the (layer,
-- phase, stage) of the op that issued them, with one op name: the diff's evidence for sync changes.
SELECT y.rank, s.step, y.kind, count(*) AS n, sum(y.end_ns - y.start_ns)::BIGINT AS dur_ns,
       c.layer,
       CASE WHEN c.anchor IS NOT NULL OR c.phase = 'backward' THEN 'backward'
            WHEN c.phase IS NOT NULL THEN c.phase
            WHEN c.layer IS NOT NULL THEN 'forward' ELSE 'other' END AS phase,
       coalesce(c.stage, 'other') AS stage,
       any_value(r.name) AS op
FROM syncs y
JOIN launches l ON l.rank = y.rank AND l.correlation = y.correlation
LEFT JOIN range_context c ON c.id = l.op_id
LEFT JOIN cpu_ranges r ON r.id = l.op_id
JOIN step_ranges s ON s.rank = y.rank AND y.start_ns >= s.cpu_start_ns AND y.start_ns < s.cpu_end_ns
WHERE y.kind IN ('stream_sync', 'context_sync', 'event_sync')
GROUP BY ALL
