-- step: range_context_raw
-- scope: rank
-- requires: cpu_ranges
-- params: layer_regexes, stage_regexes, stage_names, phase_regexes, phase_names
-- produces: id, rank, tid, layer, stage, phase, anchor, names_stage, head
-- range_context_raw: (before layer inference): for every CPU range, the layer, stage and phase named
-- by itself or by its innermost tagged ancestor on the same thread, and `anchor`: the innermost
-- enclosing backward node (an autograd `evaluate_function` / `*Backward` range with a sequence
-- number).
-- `names_stage`: the range itself names a stage or a layer (an annotation or module range).
-- `head`: for ranges inside a stage-naming annotation whose context has no layer number, the
-- outermost such annotation (the member of a repeating block that `layer_blocks` numbers).
-- The tags come from the attribution rules (traceview/config.py), given as lists: the first rule
-- (in list order) whose regex matches names the layer (its first group, as a number), the stage
-- ($stage_names[i]) or the phase ($phase_names[i]). Layer and stage rules read `tname`: the name,
-- or for a `with_stack` frame (`path/file.py(12): fn`) the function name alone; they apply to
-- annotations, NVTX and module ranges only: framework ops (aten::topk, MmBackward0, ...) and
-- `with_stack` frames name no layer or stage (`_must_dispatch_in_python` names no stage), except
-- Megatron's MoE token dispatcher, whose methods are the only record of dispatch / combine.
-- The rules' regexes are matched against the distinct names only (a regex that is not a constant
-- is compiled per row).
WITH RECURSIVE named AS (
    SELECT *, CASE WHEN regexp_matches(name, '\.py\(\d+\): ')
                   THEN regexp_extract(name, '\.py\(\d+\): (.*)$', 1) ELSE name END AS tname
    FROM cpu_ranges
),
names AS (SELECT DISTINCT name, tname FROM named),
layer_rx AS (
    SELECT i, CAST($layer_regexes AS VARCHAR[])[i] AS rx FROM range(1, len(CAST($layer_regexes AS VARCHAR[])) + 1) t(i)
),
stage_rx AS (
    SELECT i, CAST($stage_regexes AS VARCHAR[])[i] AS rx, CAST($stage_names AS VARCHAR[])[i] AS tag
    FROM range(1, len(CAST($stage_regexes AS VARCHAR[])) + 1) t(i)
),
phase_rx AS (
    SELECT i, CAST($phase_regexes AS VARCHAR[])[i] AS rx, CAST($phase_names AS VARCHAR[])[i] AS tag
    FROM range(1, len(CAST($phase_regexes AS VARCHAR[])) + 1) t(i)
),
layer_of AS (   -- the first matching rule's first group
    SELECT name, try_cast(regexp_extract(tname, arg_min(r.rx, r.i), 1) AS INTEGER) AS layer
    FROM names n JOIN layer_rx r ON regexp_matches(n.tname, r.rx) GROUP BY name, tname
),
stage_of AS (SELECT name, arg_min(r.tag, r.i) AS stage FROM names n JOIN stage_rx r ON regexp_matches(n.tname, r.rx) GROUP BY name),
phase_of AS (SELECT name, arg_min(r.tag, r.i) AS phase FROM names n JOIN phase_rx r ON regexp_matches(n.name, r.rx) GROUP BY name),
tagged AS (
    SELECT d.*, CASE WHEN d.kind = 'op' THEN false
                     WHEN regexp_matches(d.name, '\.py\(\d+\): ')
                          AND NOT regexp_matches(d.name, 'moe/token_dispatcher\.py\(\d+\): ') THEN false
                     ELSE true END AS may_name
    FROM named d
),
tags AS (
    SELECT t.id, t.rank, t.tid, t.parent_id, t.kind, t.name, t.seq, t.fwd_id,
           CAST(CASE WHEN t.may_name THEN l.layer END AS INTEGER) AS layer,
           CAST(CASE WHEN t.may_name THEN s.stage END AS VARCHAR) AS stage,
           CAST(p.phase AS VARCHAR) AS phase,
           (t.seq IS NOT NULL AND (t.name LIKE 'autograd::engine::evaluate_function%'
                                   OR regexp_matches(t.name, 'Backward[0-9]*$'))) AS bwd_node
    FROM tagged t
    LEFT JOIN layer_of l ON l.name = t.name
    LEFT JOIN stage_of s ON s.name = t.name
    LEFT JOIN phase_of p ON p.name = t.name
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
