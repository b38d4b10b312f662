-- breakdown: partition each step window's GPU time (union over all streams of the rank) into
-- compute, exposed comm, exposed memory and idle (these four add up to the window exactly),
-- plus overlapped comm (comm concurrent with compute) and total comm.
-- Sweep line: +1/-1 per class at each activity's (clipped) start/end; the running sums give,
-- for each elementary segment between consecutive boundaries, which classes are active.
-- Input: windows (rank, step, start_ns, end_ns), activity_class.
WITH w AS (SELECT rank, step, start_ns AS ws, end_ns AS we FROM windows),
clipped AS (
    SELECT w.rank, w.step, greatest(a.start_ns, w.ws) AS s, least(a.end_ns, w.we) AS e, a.class
    FROM activity_class a
    JOIN w ON a.rank = w.rank AND a.end_ns > w.ws AND a.start_ns < w.we
),
deltas AS (
    SELECT rank, step, s AS t,
           (class = 'compute')::INT AS dc, (class = 'comm')::INT AS dm, (class = 'memory')::INT AS dx
    FROM clipped WHERE e > s
    UNION ALL
    SELECT rank, step, e, -(class = 'compute')::INT, -(class = 'comm')::INT, -(class = 'memory')::INT
    FROM clipped WHERE e > s
    UNION ALL
    SELECT rank, step, ws, 0, 0, 0 FROM w
    UNION ALL
    SELECT rank, step, we, 0, 0, 0 FROM w
),
points AS (
    SELECT rank, step, t, sum(dc) AS dc, sum(dm) AS dm, sum(dx) AS dx
    FROM deltas GROUP BY rank, step, t
),
segments AS (
    SELECT rank, step, t,
           lead(t) OVER win - t AS len,
           sum(dc) OVER run AS c, sum(dm) OVER run AS m, sum(dx) OVER run AS x
    FROM points
    WINDOW win AS (PARTITION BY rank, step ORDER BY t),
           run AS (PARTITION BY rank, step ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT w.rank, w.step, w.ws AS start_ns, (w.we - w.ws) AS step_time_ns,
       coalesce(sum(len) FILTER (WHERE c > 0), 0)::BIGINT                      AS compute_ns,
       coalesce(sum(len) FILTER (WHERE c = 0 AND m > 0), 0)::BIGINT            AS exposed_comm_ns,
       coalesce(sum(len) FILTER (WHERE c > 0 AND m > 0), 0)::BIGINT            AS overlapped_comm_ns,
       coalesce(sum(len) FILTER (WHERE c = 0 AND m = 0 AND x > 0), 0)::BIGINT  AS exposed_memory_ns,
       coalesce(sum(len) FILTER (WHERE c = 0 AND m = 0 AND x = 0), 0)::BIGINT  AS idle_ns,
       coalesce(sum(len) FILTER (WHERE m > 0), 0)::BIGINT                      AS comm_ns
FROM w
LEFT JOIN segments s ON s.rank = w.rank AND s.step = w.step AND s.len IS NOT NULL
GROUP BY w.rank, w.step, w.ws, w.we
ORDER BY w.rank, w.step
