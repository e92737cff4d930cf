-- devices: per file: the GPUs (and host CPU) it ran on with their specs and peaks, for side-by-side reading
-- run: file position
-- name: device name
-- kind: 'gpu' | 'cpu'
-- count: devices of this name in the file (over processes)
-- cc: compute capability
-- sms: streaming multiprocessors
-- memory_gb: global memory, GB
-- clock_mhz: max SM clock
-- peak_memory_bw_gbps: peak DRAM bandwidth, GB/s
-- peak_host_link_gbps: peak PCIe / C2C bandwidth per direction, GB/s
-- peak_nvlink_gbps: peak NVLink bandwidth per direction, GB/s
-- peak_tensor_tflops: dense 16-bit tensor-core peak, TFLOP/s (datasheet estimate)
-- peak_fp32_tflops: FP32 peak, TFLOP/s (datasheet estimate)
-- peaks_from: 'file' (recorded), 'estimate' (cuptiprof's table of known GPUs), or 'file+estimate'
SELECT run, name, kind, count(*) AS count, any_value(compute_capability) AS cc,
       any_value(sm_count) AS sms, any_value(memory_gb) AS memory_gb, any_value(core_clock_mhz) AS clock_mhz,
       max(peak_memory_bw_gbps) AS peak_memory_bw_gbps, max(peak_host_link_gbps) AS peak_host_link_gbps,
       max(peak_nvlink_gbps) AS peak_nvlink_gbps, max(peak_tensor_tflops) AS peak_tensor_tflops,
       max(peak_fp32_tflops) AS peak_fp32_tflops, any_value(peaks_from) AS peaks_from
FROM cmp_devices
GROUP BY run, name, kind
ORDER BY run, kind DESC, name
