-- step: segment_groups
-- scope: rank
-- requires: activity_spans, segments, activity_attribution
-- produces: rank, step, seg, t, t_end, layers, phases, stages
-- segment_groups: per elementary segment of each window (see `segments`), the groups its time is
-- charged to by the rules of activity_shares (the activities deciding its class; an idle gap: the
-- activity that ends it), as sorted lists of layer labels, phases and stages (the Perfetto
-- export's layer / phase / stage track).
WITH cover AS (SELECT rank, step, id, class, unnest(range(i0, i1)) AS seg FROM activity_spans),
deciding AS (
    SELECT v.rank, v.step, v.seg, v.id
    FROM cover v JOIN segments s ON s.rank = v.rank AND s.step = v.step AND s.seg = v.seg
    WHERE (v.class = 'compute' AND s.c > 0) OR (v.class = 'comm' AND s.c = 0 AND s.m > 0)
       OR (v.class = 'memory' AND s.c = 0 AND s.m = 0 AND s.x > 0)
),
idle AS (
    SELECT s.rank, s.step, s.seg, arg_min(c.id, c.id) AS id
    FROM segments s JOIN activity_spans c ON c.rank = s.rank AND c.step = s.step AND c.s = s.t_end
    WHERE s.t_end IS NOT NULL AND s.c = 0 AND s.m = 0 AND s.x = 0
    GROUP BY s.rank, s.step, s.seg
),
charged AS (SELECT * FROM deciding UNION ALL SELECT * FROM idle)
SELECT g.rank, g.step, g.seg, s.t, s.t_end,
       list_sort(list_distinct(list(CASE t.region WHEN 'layer' THEN 'layer ' || t.layer::VARCHAR
                                                       || CASE WHEN t.layer_inferred THEN ' (inferred)' ELSE '' END
                                                  WHEN 'layer_unknown' THEN 'layer unknown'
                                                  WHEN 'outside' THEN 'outside layers'
                                                  ELSE 'unattributed' END))) AS layers,
       list_sort(list_distinct(list(t.phase))) AS phases,
       list_sort(list_distinct(list(t.stage))) AS stages
FROM charged g
JOIN segments s ON s.rank = g.rank AND s.step = g.step AND s.seg = g.seg
JOIN activity_attribution t ON t.id = g.id
GROUP BY g.rank, g.step, g.seg, s.t, s.t_end
ORDER BY g.rank, g.step, s.t
