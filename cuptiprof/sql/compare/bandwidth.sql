-- bandwidth: per file and copy direction: achieved bandwidth against the device's peak (host link for host copies, DRAM for device copies, NVLink for peer copies)
-- run: file position
-- direction: 'HtoD' | 'DtoH' | 'DtoD' | 'PtoP' | ...
-- copies: copies in the recorded steps
-- mean_bytes: mean bytes per copy (small copies never reach the peak)
-- total_ms: summed copy time
-- achieved_gbps: bytes / copy time, GB/s
-- peak_of: which peak applies: 'host link' | 'device memory' | 'nvlink'
-- peak_gbps: that peak, GB/s; a device-to-device copy reads and writes every byte, so it tops out near half the DRAM peak
-- pct_peak: 100 * achieved_gbps / peak_gbps
-- peak_source: 'file' (recorded with the run) or 'estimate' (cuptiprof's table of known GPUs)
WITH c AS (
    SELECT run, device_id, substr(name, 8) AS direction, bytes, end_ns - start_ns AS d
    FROM cmp_act WHERE kind = 'memcpy'
), dev AS (
    SELECT run, device_id, max(peak_memory_bw_gbps) AS hbm, max(peak_host_link_gbps) AS link,
           max(peak_nvlink_gbps) AS nvl, any_value(peaks_from) AS src,
           any_value(link_from) AS link_src, any_value(hbm_from) AS hbm_src, any_value(nvlink_from) AS nvl_src
    FROM cmp_devices WHERE kind = 'gpu' GROUP BY run, device_id
), agg AS (
    SELECT c.run, c.direction, count(*) AS copies, avg(c.bytes) AS mean_bytes, sum(c.d) / 1e6 AS total_ms,
           sum(c.bytes) / nullif(sum(c.d), 0) AS achieved_gbps,
           copy_peak_of(c.direction) AS peak_of,
           max(d.hbm) AS hbm, max(d.link) AS link, max(d.nvl) AS nvl,
           any_value(d.hbm_src) AS hbm_src, any_value(d.link_src) AS link_src, any_value(d.nvl_src) AS nvl_src
    FROM c LEFT JOIN dev d ON d.run = c.run AND d.device_id = c.device_id
    GROUP BY c.run, c.direction
)
SELECT run, direction, copies, mean_bytes, total_ms, achieved_gbps, peak_of,
       CASE peak_of WHEN 'host link' THEN link WHEN 'nvlink' THEN nvl ELSE hbm END AS peak_gbps,
       100.0 * achieved_gbps / nullif(CASE peak_of WHEN 'host link' THEN link WHEN 'nvlink' THEN nvl ELSE hbm END, 0)
           AS pct_peak,
       CASE peak_of WHEN 'host link' THEN link_src WHEN 'nvlink' THEN nvl_src ELSE hbm_src END AS peak_source
FROM agg
ORDER BY run, direction
