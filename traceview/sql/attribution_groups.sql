-- step: attribution_groups
-- scope: rank
-- requires: activity_attribution, gpu_activities
-- produces: rank, region, is_backward, linked, cross_thread, cross_ambiguous, layer_inferred, n, busy_ns
-- attribution_groups: per rank, the GPU activities in steps (count and busy ns) by how they were
-- attributed: region, backward or not, linked to a forward op, attributed across threads
-- (ambiguous or not), layer number inferred. The report's attribution shares sum these.
SELECT t.rank, t.region, t.is_backward, t.linked, t.cross_thread, t.cross_ambiguous, t.layer_inferred,
       count(*) AS n, sum(a.end_ns - a.start_ns)::BIGINT AS busy_ns
FROM activity_attribution t JOIN gpu_activities a ON a.id = t.id
WHERE t.step IS NOT NULL
GROUP BY ALL
