-- throughput: per file and key with known work per call (--flops / --bytes): achieved throughput against the device's peak (estimates)
-- run: file position
-- key: the compared key the work applies to
-- key_type: which key matched
-- pattern: the NAME given to --flops/--bytes (exact key or glob pattern)
-- calls_per_step: median calls per step
-- ms: median time per step
-- gflop_per_call: work per call given by the user
-- tflops: calls_per_step * gflop_per_call / ms: achieved TFLOP/s (estimate)
-- pct_tensor_peak: tflops against the device's dense 16-bit tensor-core peak (estimate)
-- pct_fp32_peak: tflops against the device's FP32 peak (estimate)
-- gb_per_call: bytes moved per call given by the user, GB
-- gbps: achieved memory throughput, GB/s (estimate)
-- memory_peak_of: the peak gbps is set against: 'device memory' (DRAM), or for a copy key ('Memcpy HtoD', ...) what bounds its direction: 'host link' | 'nvlink' | 'device memory'
-- pct_memory_peak: gbps against that peak
-- peak_source: where the peaks came from ('file' | 'estimate' | 'file+estimate')
WITH w AS (SELECT * FROM cmp_work),
m AS (
    SELECT o.run, o.key, o.key_type, o.kind, w.pattern, o.calls_per_step, o.ms, w.gflop AS gflop_per_call,
           w.gbytes AS gb_per_call
    FROM compare_ops o JOIN w ON o.key = w.pattern OR o.key GLOB w.pattern
), dev AS (
    SELECT run, max(peak_tensor_tflops) AS tensor, max(peak_fp32_tflops) AS fp32,
           max(peak_memory_bw_gbps) AS hbm, max(peak_host_link_gbps) AS link,
           max(peak_nvlink_gbps) AS nvl, any_value(peaks_from) AS src
    FROM cmp_devices WHERE kind = 'gpu' GROUP BY run
), t AS (
    SELECT m.*, m.calls_per_step * m.gflop_per_call / nullif(m.ms, 0) AS tflops,
           1000.0 * m.calls_per_step * m.gb_per_call / nullif(m.ms, 0) AS gbps, d.tensor, d.fp32, d.hbm,
           d.link, d.nvl, d.src,
           -- a copy keyed by its name: --by op, and --by family, whose family of a copy is its name
           copy_peak_of(CASE WHEN m.kind = 'memcpy' AND m.key_type IN ('name', 'family') THEN substr(m.key, 8) END)
               AS memory_peak_of
    FROM m LEFT JOIN dev d USING (run)
)
SELECT run, key, key_type, pattern, calls_per_step, ms, gflop_per_call, tflops,
       100.0 * tflops / nullif(tensor, 0) AS pct_tensor_peak, 100.0 * tflops / nullif(fp32, 0) AS pct_fp32_peak,
       gb_per_call, gbps, CASE WHEN gb_per_call IS NOT NULL THEN memory_peak_of END AS memory_peak_of,
       100.0 * gbps / nullif(CASE memory_peak_of WHEN 'host link' THEN link WHEN 'nvlink' THEN nvl ELSE hbm END, 0)
           AS pct_memory_peak, src AS peak_source
FROM t
ORDER BY key, run
