-- step: range_context
-- scope: rank
-- requires: range_context_raw, layer_blocks
-- produces: id, rank, tid, layer, stage, phase, anchor, names_stage, head, layer_inferred
-- threads: all
-- range_context: range_context_raw with the layer ordinals `layer_blocks` inferred for the
-- ranges of repeating stage blocks whose annotations carry no layer number (layer_inferred).
SELECT r.id, r.rank, r.tid, coalesce(r.layer, b.layer) AS layer, r.stage, r.phase, r.anchor,
       r.names_stage, r.head, (r.layer IS NULL AND b.layer IS NOT NULL) AS layer_inferred
FROM range_context_raw r LEFT JOIN layer_blocks b ON b.id = r.head
ORDER BY r.id
