-- range_context (before layer inference): for every CPU range, the layer, stage and phase named
-- by itself or by its innermost tagged ancestor on the same thread, and `anchor`: the innermost
-- enclosing backward node (an autograd `evaluate_function` / `*Backward` range with a sequence
-- number).
-- `names_stage`: the range itself names a stage or a layer (an annotation or module range).
-- `head`: for ranges inside a stage-naming annotation whose context has no layer number, the
-- outermost such annotation (the member of a repeating block that `layer_blocks` numbers).
-- The tag expressions (/*LAYER*/, /*STAGE*/, /*PHASE*/) are generated from the attribution rules
-- and reference the rules' regexes as parameters only. Layer and stage rules read `tname`: the
-- name, or for a `with_stack` frame (`path/file.py(12): fn`) the function name alone.
-- Input: cpu_ranges.
WITH RECURSIVE named AS (
    SELECT *, CASE WHEN regexp_matches(name, '\.py\(\d+\): ')
                   THEN regexp_extract(name, '\.py\(\d+\): (.*)$', 1) ELSE name END AS tname
    FROM cpu_ranges
),
tags AS (
    SELECT id, rank, tid, parent_id, kind, name, seq, fwd_id,
           /*LAYER*/ AS layer,
           /*STAGE*/ AS stage,
           /*PHASE*/ AS phase,
           (seq IS NOT NULL AND (name LIKE 'autograd::engine::evaluate_function%'
                                 OR regexp_matches(name, 'Backward[0-9]*$'))) AS bwd_node
    FROM named
),
ctx AS (
    SELECT id, rank, tid, layer, stage, phase, CASE WHEN bwd_node THEN id END AS anchor,
           (layer IS NOT NULL OR stage IS NOT NULL) AS names_stage,
           CASE WHEN stage IS NOT NULL AND layer IS NULL THEN id END AS head
    FROM tags WHERE parent_id IS NULL
    UNION ALL
    SELECT t.id, t.rank, t.tid, coalesce(t.layer, c.layer), coalesce(t.stage, c.stage), coalesce(t.phase, c.phase),
           CASE WHEN t.bwd_node THEN t.id ELSE c.anchor END,
           (t.layer IS NOT NULL OR t.stage IS NOT NULL),
           CASE WHEN c.head IS NOT NULL THEN c.head
                WHEN t.stage IS NOT NULL AND coalesce(t.layer, c.layer) IS NULL THEN t.id END
    FROM tags t JOIN ctx c ON t.parent_id = c.id
)
SELECT * FROM ctx
