-- step: activity_timeline
-- scope: rank
-- requires: gpu_activities, activity_class, activity_attribution
-- produces: id, rank, device, stream, start_ns, end_ns, kind, name, class, step, layer, phase, stage
-- produces: region
-- activity_timeline: every GPU activity with its class and attribution, per rank, device and
-- stream in time order (the Perfetto export's GPU stream tracks).
SELECT a.id, a.rank, a.device, a.stream, a.start_ns, a.end_ns, a.kind, a.name, c.class,
       t.step, t.layer, t.phase, t.stage, t.region
FROM gpu_activities a
LEFT JOIN activity_class c ON c.id = a.id
LEFT JOIN activity_attribution t ON t.id = a.id
ORDER BY a.rank, a.device NULLS FIRST, a.stream NULLS FIRST, a.start_ns, a.end_ns DESC, a.id
