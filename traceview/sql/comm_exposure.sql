-- step: comm_exposure
-- scope: rank
-- requires: activity_spans, segments
-- produces: id, rank, exposed
-- comm_exposure: per communication activity, its share of the comm-only segments of the step
-- windows it runs in (each such segment shared equally among the comm activities running).
WITH cover AS (SELECT rank, step, id, unnest(range(i0, i1)) AS seg FROM activity_spans WHERE class = 'comm')
SELECT v.id, v.rank, sum(CASE WHEN s.c = 0 THEN (s.t_end - s.t) / s.m ELSE 0 END) AS exposed
FROM cover v JOIN segments s ON s.rank = v.rank AND s.step = v.step AND s.seg = v.seg
GROUP BY v.id, v.rank
