-- step: name_tags
-- scope: rank
-- requires: cpu_ranges
-- params: layer_regexes, stage_regexes, stage_names, phase_regexes, phase_names
-- produces: rank, name, frame_only, layer, stage, phase, bwd_name
-- threads: all
-- name_tags: what each distinct CPU range name (of each rank) names by itself (before inheritance from a
-- range's ancestors, which range_context_raw adds: traceview/analysis/range_tree.py, where these
-- tags are given to the ranges by name, in their row order): the layer, stage and phase, whether
-- it is a `with_stack` frame that names no layer or stage (`frame_only`), and `bwd_name`: it is
-- the name of a backward node (an autograd `evaluate_function` / `*Backward` range; a range of
-- that name with a sequence number is one).
-- The tags come from the attribution rules (traceview/config.py), given as lists: the first rule
-- (in list order) whose regex matches names the layer (its first group, as a number), the stage
-- ($stage_names[i]) or the phase ($phase_names[i]). Layer and stage rules read `tname`: the name,
-- or for a `with_stack` frame (`path/file.py(12): fn`) the function name alone; they apply to
-- annotations, NVTX and module ranges only (range_context_raw drops them from framework ops:
-- aten::topk, MmBackward0, ...); `with_stack` frames name no layer or stage
-- (`_must_dispatch_in_python` names no stage), except Megatron's MoE token dispatcher, whose
-- methods are the only record of dispatch / combine.
-- The rules' regexes are matched against the distinct names only, once for all ranks (a regex
-- that is not a constant is compiled per row): a trace of a million ranges has a few hundred names.
-- Before that, each family's rules joined into one regex, `(?:rx1)|(?:rx2)|...` (an expression of
-- the parameter: a constant, compiled once), pass only the names that some rule of the family
-- matches; the names none matches (most: framework ops) are never compiled against each rule
-- (overlap x5, one thread: 62 -> 27 ms; nsys a2a: 30 -> 12 ms). A rule's inline flags and groups
-- stay inside its own (?:...) (RE2; two rules may name the same group). Past 64 rules every name
-- passes (the joined regex is not made).
WITH rank_names AS (SELECT DISTINCT rank, name FROM cpu_ranges),
names AS (  -- the distinct names, each matched once
    SELECT name, tname, regexp_matches(name, '\.py\(\d+\): ') AS frame,
           regexp_matches(name, 'moe/token_dispatcher\.py\(\d+\): ') AS dispatcher,
           (name LIKE 'autograd::engine::evaluate_function%' OR regexp_matches(name, 'Backward[0-9]*$')) AS bwd_name
    FROM (SELECT name, CASE WHEN regexp_matches(name, '\.py\(\d+\): ')
                            THEN regexp_extract(name, '\.py\(\d+\): (.*)$', 1) ELSE name END AS tname
          FROM (SELECT DISTINCT name FROM rank_names))
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
    FROM (SELECT * FROM names WHERE regexp_matches(tname, CASE
              WHEN len(CAST($layer_regexes AS VARCHAR[])) = 0 THEN NULL
              WHEN len(CAST($layer_regexes AS VARCHAR[])) > 64 THEN ''
              ELSE '(?:' || array_to_string(CAST($layer_regexes AS VARCHAR[]), ')|(?:') || ')' END)) n
    JOIN layer_rx r ON regexp_matches(n.tname, r.rx) GROUP BY name, tname
),
stage_of AS (
    SELECT name, arg_min(r.tag, r.i) AS stage
    FROM (SELECT * FROM names WHERE regexp_matches(tname, CASE
              WHEN len(CAST($stage_regexes AS VARCHAR[])) = 0 THEN NULL
              WHEN len(CAST($stage_regexes AS VARCHAR[])) > 64 THEN ''
              ELSE '(?:' || array_to_string(CAST($stage_regexes AS VARCHAR[]), ')|(?:') || ')' END)) n
    JOIN stage_rx r ON regexp_matches(n.tname, r.rx) GROUP BY name
),
phase_of AS (
    SELECT name, arg_min(r.tag, r.i) AS phase
    FROM (SELECT * FROM names WHERE regexp_matches(name, CASE
              WHEN len(CAST($phase_regexes AS VARCHAR[])) = 0 THEN NULL
              WHEN len(CAST($phase_regexes AS VARCHAR[])) > 64 THEN ''
              ELSE '(?:' || array_to_string(CAST($phase_regexes AS VARCHAR[]), ')|(?:') || ')' END)) n
    JOIN phase_rx r ON regexp_matches(n.name, r.rx) GROUP BY name
),
tag_of AS (     -- per name: (layer, stage) as an annotation names them, the phase, a backward node's name
    SELECT n.name, n.frame AND NOT n.dispatcher AS frame_only, l.layer, s.stage, p.phase, n.bwd_name
    FROM names n
    LEFT JOIN layer_of l ON l.name = n.name
    LEFT JOIN stage_of s ON s.name = n.name
    LEFT JOIN phase_of p ON p.name = n.name
)
SELECT r.rank, t.name, t.frame_only, CAST(t.layer AS INTEGER) AS layer, CAST(t.stage AS VARCHAR) AS stage,
       CAST(t.phase AS VARCHAR) AS phase, t.bwd_name
FROM rank_names r JOIN tag_of t ON t.name = r.name
ORDER BY r.rank, t.name
