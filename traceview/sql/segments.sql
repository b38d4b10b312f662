-- step: segments
-- scope: rank
-- requires: windows, activity_class
-- produces: rank, step, t, seg, t_end, c, m, x
-- segments: the elementary segments of each window's GPU timeline (union over the rank's
-- streams) between consecutive activity boundaries, with how many compute (c), comm (m) and
-- memory (x) activities run in each. Sweep line: +1/-1 per class at each clipped start/end.
-- One row per boundary point; `seg` numbers the points in time order per window and
-- `t_end` is null at the window's last point.
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
-- The three counts travel packed in one BIGINT (c + m * 2^21 + x * 2^42): one running sum instead
-- of three (the window's cost). Exact: at every point each running count is the number of
-- activities of its class running, >= 0 and far below 2^21, so the packed sum decodes uniquely.
points AS (
    SELECT rank, step, t, sum(dc + dm * 2097152 + dx * 4398046511104)::BIGINT AS d
    FROM deltas GROUP BY rank, step, t
),
-- One running order over all windows, (rank, step, t), not one sort per window (DuckDB's
-- partitioned running sum cost 3x the whole sort): a window's running sum starts at 0 because every
-- earlier window's deltas add up to 0 (each +1 has its -1 in the same window); a point's `seg` is its
-- place overall less the points of the earlier windows (`offsets`); the next point is its window's
-- where it has the same rank and step.
counts AS (SELECT rank, step, count(*) AS k FROM points GROUP BY rank, step),
offsets AS (SELECT rank, step, sum(k) OVER (ORDER BY rank, step ROWS UNBOUNDED PRECEDING) - k AS base FROM counts),
swept AS (
    SELECT rank, step, t,
           row_number() OVER win AS i,
           lead(t) OVER win AS next_t, lead(rank) OVER win AS next_rank, lead(step) OVER win AS next_step,
           sum(d) OVER (win ROWS UNBOUNDED PRECEDING) AS n
    FROM points
    WINDOW win AS (ORDER BY rank, step, t)
)
SELECT s.rank, s.step, s.t, (s.i - 1 - o.base)::BIGINT AS seg,
       CASE WHEN s.next_rank = s.rank AND s.next_step = s.step THEN s.next_t END AS t_end,
       (n % 2097152)::INTEGER AS c, ((n // 2097152) % 2097152)::INTEGER AS m, (n // 4398046511104)::INTEGER AS x
FROM swept s JOIN offsets o ON o.rank = s.rank AND o.step = s.step
