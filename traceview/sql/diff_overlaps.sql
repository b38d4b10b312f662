-- step: diff_overlaps
-- scope: rank
-- requires: windows, activity_class, activity_attribution
-- produces: rank, step, layer, phase, stage, with_stage, with_layer, overlap_ns
-- diff_overlaps: what compute ran beside each collective: per step window, communication group
-- (layer, phase, stage) and the compute's (stage, layer), the overlapped ns (comm clipped to the
-- window; the diff's wording of overlap changes).
WITH w AS (SELECT rank, step, start_ns AS ws, end_ns AS we FROM windows),
comm AS (
    SELECT a.id, a.rank, w.step, greatest(a.start_ns, w.ws) AS s, least(a.end_ns, w.we) AS e
    FROM activity_class a JOIN w ON a.rank = w.rank AND a.end_ns > w.ws AND a.start_ns < w.we
    WHERE a.class = 'comm'
),
comp AS (
    SELECT a.id, a.rank, a.start_ns AS s, a.end_ns AS e FROM activity_class a WHERE a.class = 'compute'
)
SELECT c.rank, c.step, tc.layer, tc.phase, tc.stage, tk.stage AS with_stage, tk.layer AS with_layer,
       sum(least(c.e, k.e) - greatest(c.s, k.s))::DOUBLE AS overlap_ns
FROM comm c
JOIN comp k ON k.rank = c.rank AND k.s < c.e AND k.e > c.s
JOIN activity_attribution tc ON tc.id = c.id
JOIN activity_attribution tk ON tk.id = k.id
GROUP BY ALL
