-- step: cp_host_syncs
-- scope: rank
-- requires: launches, gpu_activities, syncs, cpu_ranges
-- produces: id, rank, tid, start_ns, end_ns, dur_ns, name, op, parent_op, grandparent_op
-- cp_host_syncs: CPU calls in which the host thread blocked until GPU work finished.
-- A call is a host sync when it is a synchronize API (cudaStreamSynchronize,
-- cudaDeviceSynchronize, cudaEventSynchronize, cuCtxSynchronize ...), when a synchronization
-- record of kind stream_sync / event_sync / context_sync names it (same rank and correlation),
-- or when it is a blocking copy: a memcpy call that returned only after its copy finished on the
-- GPU and is synchronous by nature (a non-async API, or a copy to pageable host memory).
-- op / parent_op / grandparent_op: the innermost CPU ranges around the call (the op that forced
-- the sync, e.g. aten::_local_scalar_dense < aten::item, aten::copy_ < aten::_to_copy < aten::to).
WITH blocking_copies AS (
    SELECT DISTINCT l.id
    FROM launches l JOIN gpu_activities a ON a.launch_id = l.id
    WHERE a.kind = 'memcpy' AND l.end_ns >= a.end_ns
      AND (a.name ILIKE '%pageable%' OR NOT l.name ILIKE '%async%')
),
sync_records AS (
    SELECT DISTINCT rank, correlation FROM syncs
    WHERE kind IN ('stream_sync', 'event_sync', 'context_sync') AND correlation IS NOT NULL
),
calls AS (
    SELECT l.id, l.rank, l.tid, l.start_ns, l.end_ns, l.name, l.op_id
    FROM launches l
    WHERE l.name ILIKE '%synchronize%'
       OR l.id IN (SELECT id FROM blocking_copies)
       OR EXISTS (SELECT 1 FROM sync_records s WHERE s.rank = l.rank AND s.correlation = l.correlation)
)
SELECT c.id, c.rank, c.tid, c.start_ns, c.end_ns, (c.end_ns - c.start_ns) AS dur_ns, c.name,
       o.name AS op, CASE WHEN p.kind = 'op' THEN p.name END AS parent_op,
       CASE WHEN p.kind = 'op' AND pp.kind = 'op' THEN pp.name END AS grandparent_op
FROM calls c
LEFT JOIN cpu_ranges o ON o.id = c.op_id
LEFT JOIN cpu_ranges p ON p.id = o.parent_id
LEFT JOIN cpu_ranges pp ON pp.id = p.parent_id
ORDER BY c.rank, c.tid, c.end_ns, c.id
