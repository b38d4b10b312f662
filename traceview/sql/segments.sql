-- step: segments
-- scope: rank
-- requires: windows, activity_class
-- produces: rank, step, t, seg, t_end, c, m, x
-- threads: all
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
-- The running sum per window where the windows are few; where they are many (more than 8), over
-- one order of all windows, (rank, step, t): DuckDB's partitioned running sum has a cost per
-- partition (3x the sort at 102 windows of a 34-step trace; the extra sort costs more at 2). Same
-- sums: a window's running sum starts at 0 because every earlier window's deltas add up to 0 (each
-- +1 has its -1 in the same window). One branch gets all the points, the other none.
many AS (SELECT count(*) > 8 AS yes FROM w),
swept AS (
    SELECT rank, step, t,
           (row_number() OVER win - 1)::BIGINT AS seg,
           lead(t) OVER win AS t_end,
           sum(d) OVER (win ROWS UNBOUNDED PRECEDING) AS n
    FROM points WHERE NOT (SELECT yes FROM many)
    WINDOW win AS (PARTITION BY rank, step ORDER BY t)
    UNION ALL
    SELECT rank, step, t,
           (row_number() OVER win - 1)::BIGINT AS seg,
           lead(t) OVER win AS t_end,
           sum(d) OVER (ORDER BY rank, step, t ROWS UNBOUNDED PRECEDING) AS n
    FROM points WHERE (SELECT yes FROM many)
    WINDOW win AS (PARTITION BY rank, step ORDER BY t)
)
SELECT rank, step, t, seg, t_end,
       (n % 2097152)::INTEGER AS c, ((n // 2097152) % 2097152)::INTEGER AS m, (n // 4398046511104)::INTEGER AS x
FROM swept
ORDER BY rank, step, t
