-- step: flops_op_inputs
-- scope: rank
-- requires: flops_step_ops, cpu_ranges, flops_op_kernels
-- produces: rank, step, id, name, flops, input_types, kernel_precision
-- flops_op_inputs: what says the precision of each counted op of a step: its recorded input types
-- and the math type of its compute kernel (the longest-running GEMM / attention / convolution
-- kernel it launched; the lowest id among equally long ones), null when its name shows none.
WITH top AS (
    SELECT op_id, kdtype FROM flops_op_kernels WHERE category IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY op_id ORDER BY dur_ns DESC, id) = 1
)
SELECT o.rank, o.step, o.id, o.name, o.flops, c.input_types, t.kdtype AS kernel_precision
FROM flops_step_ops o
LEFT JOIN cpu_ranges c ON c.id = o.id
LEFT JOIN top t ON t.op_id = o.id
ORDER BY o.rank, o.step, o.id
