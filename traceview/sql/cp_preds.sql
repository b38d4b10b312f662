-- step: cp_preds
-- scope: rank
-- requires: activity_class, syncs, launches, cp_host_syncs, windows, activity_origin, gpu_activities
-- produces: rank, step, id, stream, start_ns, end_ns, class, kind, name, tid, origin_start_ns
-- produces: origin_end_ns, prev_id, prev_end_ns, wait_src_id, wait_src_end_ns, sync_id
-- produces: sync_end_ns
-- cp_preds: for every GPU activity running in a step window, the candidate predecessors the
-- critical-path walk chooses from:
--   prev_*      the previous activity on the same stream (stream order; by GPU start);
--   wait_src_*  cross-stream waits: for a stream_wait_event record (cudaStreamWaitEvent) on
--               stream S waiting for an event recorded on stream E, the first activity on S
--               launched after the wait call depends on the last activity on E launched before
--               it (the call's time is its launch record's start where correlated, else the
--               record's start). Several waits: the source that ends last;
--   origin_*    the launch call (a kernel starts no earlier than its launch; the host was late
--               when the call ended after the GPU predecessors had finished); origin_end_ns is
--               null where no launch call is linked (the op's end says nothing about the launch);
--   sync_*      the last host sync (cp_host_syncs) on the launching thread that ended before the
--               launch call started (the host was blocked there just before launching).
WITH acts AS (   -- integers only: strings carried through the window, joins and sort cost most of the query
    SELECT c.id, c.rank, c.stream, c.start_ns, c.end_ns, o.tid, o.origin_start_ns,
           CASE WHEN o.launch_name IS NOT NULL THEN o.origin_end_ns END AS origin_end_ns,
           lag(c.id) OVER s AS prev_id, lag(c.end_ns) OVER s AS prev_end_ns
    FROM activity_class c JOIN activity_origin o ON o.id = c.id
    WINDOW s AS (PARTITION BY c.rank, c.stream ORDER BY c.start_ns, c.end_ns, c.id)
),
launched AS (SELECT * FROM acts WHERE origin_start_ns IS NOT NULL),
waits AS (
    SELECT w.id AS wait_id, w.rank, w.stream, w.event_stream,
           coalesce(l.start_ns, w.start_ns) AS cut
    FROM syncs w
    LEFT JOIN launches l ON l.rank = w.rank AND l.correlation = w.correlation AND w.correlation IS NOT NULL
    WHERE w.kind = 'stream_wait_event' AND w.stream IS NOT NULL AND w.event_stream IS NOT NULL
      AND w.stream <> w.event_stream
    QUALIFY row_number() OVER (PARTITION BY w.id ORDER BY l.start_ns DESC NULLS LAST) = 1
),
-- the launches on the streams that wait and on those waited for: the only rows the ASOF joins below
-- can match (an ASOF join orders its whole right side, even for no wait at all)
waiting_launched AS (
    SELECT * FROM launched l WHERE EXISTS (SELECT 1 FROM waits w WHERE w.rank = l.rank AND w.stream = l.stream)
),
waited_launched AS (
    SELECT * FROM launched l WHERE EXISTS (SELECT 1 FROM waits w WHERE w.rank = l.rank AND w.event_stream = l.stream)
),
waiter AS (
    SELECT w.wait_id, w.rank, w.event_stream, w.cut, a.id AS waiter_id
    FROM waits w ASOF JOIN waiting_launched a
      ON a.rank = w.rank AND a.stream = w.stream AND w.cut < a.origin_start_ns
),
source AS (
    SELECT w.waiter_id, a.id AS src_id, a.end_ns AS src_end_ns
    FROM waiter w ASOF JOIN waited_launched a
      ON a.rank = w.rank AND a.stream = w.event_stream AND w.cut > a.origin_start_ns
),
best_wait AS (
    SELECT waiter_id, arg_max(src_id, src_end_ns) AS wait_src_id, max(src_end_ns) AS wait_src_end_ns
    FROM source GROUP BY waiter_id
),
last_sync AS (
    SELECT a.id, h.id AS sync_id, h.end_ns AS sync_end_ns
    FROM launched a ASOF JOIN cp_host_syncs h
      ON h.rank = a.rank AND h.tid = a.tid AND a.origin_start_ns >= h.end_ns
)
-- (critical_path._chunk_sql runs the CTEs above, less last_sync, with a SELECT of its own)
SELECT w.rank, w.step, a.id, a.stream, a.start_ns, a.end_ns, c.class, g.kind, g.name, a.tid,
       a.origin_start_ns, a.origin_end_ns, a.prev_id, a.prev_end_ns,
       b.wait_src_id, b.wait_src_end_ns, s.sync_id, s.sync_end_ns
FROM acts a
JOIN windows w ON a.rank = w.rank AND a.end_ns > w.start_ns AND a.start_ns < w.end_ns
JOIN activity_class c ON c.id = a.id
JOIN gpu_activities g ON g.id = a.id
LEFT JOIN best_wait b ON b.waiter_id = a.id
LEFT JOIN last_sync s ON s.id = a.id
ORDER BY w.rank, w.step, a.end_ns, a.id
