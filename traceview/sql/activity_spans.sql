-- step: activity_spans
-- scope: rank
-- requires: windows, activity_class, segments
-- produces: rank, step, id, class, s, e, i0, i1
-- activity_spans: each activity clipped to each window it overlaps, with the range [i0, i1) of
-- the window's elementary segments (see `segments`) that it covers. Attribution queries unnest
-- this range to share each segment among the activities running in it.
WITH w AS (SELECT rank, step, start_ns AS ws, end_ns AS we FROM windows),
clipped AS (
    SELECT w.rank, w.step, a.id, a.class, greatest(a.start_ns, w.ws) AS s, least(a.end_ns, w.we) AS e
    FROM activity_class a JOIN w ON a.rank = w.rank AND a.end_ns > w.ws AND a.start_ns < w.we
)
SELECT c.rank, c.step, c.id, c.class, c.s, c.e, p0.seg AS i0, p1.seg AS i1
FROM clipped c
JOIN segments p0 ON p0.rank = c.rank AND p0.step = c.step AND p0.t = c.s
JOIN segments p1 ON p1.rank = c.rank AND p1.step = c.step AND p1.t = c.e
WHERE c.e > c.s
