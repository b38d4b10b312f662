-- step: range_tags
-- scope: rank
-- requires: cpu_ranges
-- params: layer_regexes, stage_regexes, stage_names, phase_regexes, phase_names
-- produces: id, rank, tid, parent_id, layer, stage, phase, bwd_node
-- threads: all
-- range_tags: what every CPU range names by itself (before inheritance from its ancestors, which
-- range_context_raw adds: traceview/analysis/range_tree.py): the layer, stage and phase, and
-- `bwd_node`: it is a backward node (an autograd `evaluate_function` / `*Backward` range with a
-- sequence number).
-- The tags come from the attribution rules (traceview/config.py), given as lists: the first rule
-- (in list order) whose regex matches names the layer (its first group, as a number), the stage
-- ($stage_names[i]) or the phase ($phase_names[i]). Layer and stage rules read `tname`: the name,
-- or for a `with_stack` frame (`path/file.py(12): fn`) the function name alone; they apply to
-- annotations, NVTX and module ranges only: framework ops (aten::topk, MmBackward0, ...) and
-- `with_stack` frames name no layer or stage (`_must_dispatch_in_python` names no stage), except
-- Megatron's MoE token dispatcher, whose methods are the only record of dispatch / combine.
-- The rules' regexes are matched against the distinct names only (a regex that is not a constant
-- is compiled per row), and the tags joined to the ranges by name.
WITH names AS (  -- the distinct names, each matched once
    SELECT name, tname, regexp_matches(name, '\.py\(\d+\): ') AS frame,
           regexp_matches(name, 'moe/token_dispatcher\.py\(\d+\): ') AS dispatcher,
           (name LIKE 'autograd::engine::evaluate_function%' OR regexp_matches(name, 'Backward[0-9]*$')) AS bwd_name
    FROM (SELECT name, CASE WHEN regexp_matches(name, '\.py\(\d+\): ')
                            THEN regexp_extract(name, '\.py\(\d+\): (.*)$', 1) ELSE name END AS tname
          FROM (SELECT DISTINCT name FROM cpu_ranges))
),
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
stage_of AS (
    SELECT name, arg_min(r.tag, r.i) AS stage FROM names n JOIN stage_rx r ON regexp_matches(n.tname, r.rx) GROUP BY name
),
phase_of AS (
    SELECT name, arg_min(r.tag, r.i) AS phase FROM names n JOIN phase_rx r ON regexp_matches(n.name, r.rx) GROUP BY name
),
tag_of AS (     -- per name: (layer, stage) as an annotation names them, the phase, a backward node's name
    SELECT n.name, n.frame AND NOT n.dispatcher AS frame_only, l.layer, s.stage, p.phase, n.bwd_name
    FROM names n
    LEFT JOIN layer_of l ON l.name = n.name
    LEFT JOIN stage_of s ON s.name = n.name
    LEFT JOIN phase_of p ON p.name = n.name
)
SELECT t.id, t.rank, t.tid, t.parent_id,
       CAST(CASE WHEN coalesce(t.kind = 'op', false) OR coalesce(g.frame_only, false) THEN NULL ELSE g.layer END
            AS INTEGER) AS layer,
       CAST(CASE WHEN coalesce(t.kind = 'op', false) OR coalesce(g.frame_only, false) THEN NULL ELSE g.stage END
            AS VARCHAR) AS stage,
       CAST(g.phase AS VARCHAR) AS phase,
       (t.seq IS NOT NULL AND g.bwd_name) AS bwd_node
FROM cpu_ranges t LEFT JOIN tag_of g ON g.name = t.name
ORDER BY t.id
