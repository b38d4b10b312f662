-- step: breakdown
-- scope: rank
-- requires: windows, segments
-- produces: rank, step, start_ns, step_time_ns, compute_ns, exposed_comm_ns, overlapped_comm_ns
-- produces: exposed_memory_ns, idle_ns, comm_ns
-- threads: all
-- breakdown: partition each step window's GPU time (union over all streams of the rank) into
-- compute, exposed comm, exposed memory and idle (these four add up to the window exactly),
-- plus overlapped comm (comm concurrent with compute) and total comm.
SELECT w.rank, w.step, w.start_ns, (w.end_ns - w.start_ns) AS step_time_ns,
       coalesce(sum(s.t_end - s.t) FILTER (WHERE c > 0), 0)::BIGINT                      AS compute_ns,
       coalesce(sum(s.t_end - s.t) FILTER (WHERE c = 0 AND m > 0), 0)::BIGINT            AS exposed_comm_ns,
       coalesce(sum(s.t_end - s.t) FILTER (WHERE c > 0 AND m > 0), 0)::BIGINT            AS overlapped_comm_ns,
       coalesce(sum(s.t_end - s.t) FILTER (WHERE c = 0 AND m = 0 AND x > 0), 0)::BIGINT  AS exposed_memory_ns,
       coalesce(sum(s.t_end - s.t) FILTER (WHERE c = 0 AND m = 0 AND x = 0), 0)::BIGINT  AS idle_ns,
       coalesce(sum(s.t_end - s.t) FILTER (WHERE m > 0), 0)::BIGINT                      AS comm_ns
FROM windows w
LEFT JOIN segments s ON s.rank = w.rank AND s.step = w.step AND s.t_end IS NOT NULL
GROUP BY w.rank, w.step, w.start_ns, w.end_ns
ORDER BY w.rank, w.step
