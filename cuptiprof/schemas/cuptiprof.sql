-- cuptiprof store schema: the contract between collection (CUPTI collector, trace importers)
-- and analysis (reports, compare, export). One DuckDB file per profiled run (or merged runs).
--
-- Conventions
--   * Times are BIGINT nanoseconds on the collector's clock (CLOCK_REALTIME on Linux for CUPTI;
--     the trace's own time base for imports). Durations are end_ns - start_ns.
--   * Enumerations are stored as readable text ('HtoD', 'stream_synchronize'); DuckDB
--     dictionary-compresses them.
--   * Long repeated strings (mangled kernel names, API names, range names) are interned in
--     `strings`, kernel launch configurations in `launch_configs`; the tables that hold them end
--     in `_rows` and keep only the integer ids. The view of the same name without `_rows` joins
--     the values back (use the views).
--   * Every row carries `run_id` (kernel rows through their lane), so files from several hosts/ranks merge into one.
--   * `step` is NULL when no step range claims a row; `range_id` is the innermost range that
--     launched it (NULL when none). Both are decided by the launching call, not by when the GPU
--     ran the work. A call in no range (another thread's: NCCL, a data loader), or in a range that
--     began outside every step (a worker's range pushed before the first one), takes the recorded
--     step open in its process when it began, as steps hold [start, end): a step of its own thread
--     first, then the latest-started one of any thread; never a warm-up step. The CUPTI
--     collector, the trace importers (interop.nesting.steps_at) and the run without a GPU follow
--     this rule; the collector and the run without a GPU also leave a call made inside a warm-up
--     step of its own thread with no step.
--
-- The schema version below is the single source of truth: a file whose version is newer than the
-- installed cuptiprof is refused; an older one is read when the reader still understands it.

CREATE TABLE meta (
    key   VARCHAR,   -- 'schema_version', 'created_by', 'created_at'
    value VARCHAR                       -- the value, as text
);
INSERT INTO meta VALUES ('schema_version', '2');

CREATE TABLE runs (
    run_id              INTEGER,   -- 1-based id of the run inside this file
    label               VARCHAR,   -- user label (defaults to the output file stem)
    source              VARCHAR,   -- 'cupti' | 'cpu' (no GPU: torch.profiler CPU ops under cuptiprof run, host-side ranges only under profile()) | 'light' (ranges only) | 'kineto' | 'nsys' | 'synthetic'
    command             VARCHAR,   -- command line that was profiled (for an import: `cuptiprof import` and the file names)
    host                VARCHAR,   -- host name of the writer
    start_time          TIMESTAMPTZ, -- wall-clock time the run started
    start_ns            BIGINT,    -- run start on the record clock
    end_ns              BIGINT,    -- run end on the record clock (NULL while running or after a crash)
    status              VARCHAR,   -- 'running' | 'complete' | 'interrupted' | 'failed'; 'running' in a closed file means the writer died
    cuptiprof_version   VARCHAR,        -- cuptiprof that wrote the run
    python_version      VARCHAR,        -- Python of the writing process
    cuda_driver_version VARCHAR,   -- e.g. '13.0' (NULL without a driver)
    cupti_version       VARCHAR,   -- libcupti API version and file path
    torch_version       VARCHAR,        -- torch version when torch was imported (NULL otherwise)
    settings            VARCHAR    -- JSON: warmup, steps, kinds, buffer size, step source, ...
);

CREATE TABLE processes (
    run_id      INTEGER,                -- runs.run_id this row belongs to
    pid         INTEGER,   -- OS process id
    host        VARCHAR,                -- host name of the process
    rank        INTEGER,   -- global rank from the launcher (torchrun RANK, MPI, Slurm; cuptiprof.ranks), a trace's distributedInfo or file name; NULL when unknown
    local_rank  INTEGER,   -- rank on its host (LOCAL_RANK and MPI/Slurm equivalents) when set
    world_size  INTEGER,   -- ranks in the job (WORLD_SIZE and MPI/Slurm equivalents) when set
    command     VARCHAR,   -- the command line the process was started with (python -m pkg x y, a spawned worker's own; for a Kineto import, the trace file)
    start_ns    BIGINT,                 -- process start on the record clock
    end_ns      BIGINT,    -- process end on the record clock, as the process said when it ended (a `cuptiprof run` helper that recorded nothing: its end marker); for the command of `cuptiprof run`, when the launcher saw it end if it did not say so; NULL when the process ended before it could say so
    exit_status INTEGER,   -- exit code; 128+signal for a signal; for a profile() ended by an uncaught exception (its `with` block left by one), the code Python exits with for it: 1, 130 for Ctrl-C; NULL when unknown
    ended_early BOOLEAN    -- TRUE when the process stopped before its collector closed (kill, crash, os._exit); NULL for an imported trace
);

CREATE TABLE devices (
    run_id                   INTEGER,   -- runs.run_id this row belongs to
    pid                      INTEGER,   -- process that saw the device (device ordinals are per process)
    device_id                INTEGER,   -- CUDA ordinal as seen by that process; -1 for the host CPU
    kind                     VARCHAR,   -- 'gpu' | 'cpu'
    name                     VARCHAR,   -- e.g. 'NVIDIA H200'
    uuid                     VARCHAR,   -- device UUID, e.g. 'GPU-5b7c...'
    compute_capability       VARCHAR,   -- e.g. '9.0'
    sm_count                 INTEGER,   -- streaming multiprocessors
    core_clock_mhz           DOUBLE,    -- max SM clock
    memory_clock_mhz         DOUBLE,    -- max memory clock
    memory_bus_width_bits    INTEGER,   -- memory bus width
    memory_bytes             BIGINT,    -- global memory size
    l2_bytes                 BIGINT,    -- L2 cache size
    peak_memory_bw_gbps      DOUBLE,    -- peak DRAM bandwidth, GB/s (1e9 bytes/s)
    peak_host_link_gbps      DOUBLE,    -- peak PCIe (or C2C) bandwidth per direction, GB/s, where known
    peak_nvlink_gbps         DOUBLE,    -- peak NVLink bandwidth per direction, GB/s, where known
    source                   VARCHAR    -- where the numbers came from: 'cupti' | 'cuda-bindings' | 'torch' | 'trace' | 'cpu' (the host CPU, device -1, of profile() without a GPU)
);

-- Interned strings. `demangled` is filled for mangled C++ names (NULL when the name is not mangled).
CREATE TABLE strings (
    string_id INTEGER,   -- referenced by *_rows.name_id and launch_configs.name_id
    value     VARCHAR,   -- the string as recorded (mangled kernel name, API name, range name)
    demangled VARCHAR    -- readable form of a mangled C++ name; NULL when not applicable
);

-- One row per kernel execution (CUPTI CONCURRENT_KERNEL, or an imported kernel event).
-- Kernel rows are the bulk of a file, so every column that repeats a handful of combinations is
-- interned and the row keeps one id: where it ran (run, process, device, context, stream) in
-- `lanes`; what ran, the kernel name with its launch configuration (grid, block, registers,
-- shared memory, graph node), in `launch_configs` (the name itself in `strings`). Writers pass
-- the plain columns; fewer stored columns make bulk ingest faster. Use the `kernels` view, which
-- joins them back.
CREATE TABLE kernel_rows (
    lane_id         INTEGER,   -- lanes.lane_id: run, process, device, context and stream it ran on
    correlation_id  BIGINT,    -- CUPTI correlation id of the launching API call (cudaGraphLaunch for graph replays)
    start_ns        BIGINT,             -- start, nanoseconds on the record clock
    end_ns          BIGINT,             -- end, nanoseconds on the record clock
    step            INTEGER,   -- recorded step index, NULL when no step claims it
    range_id        BIGINT,    -- innermost range (ranges.range_id) open on the launching thread; 0: none (range ids start at 1; a NULL column costs more to write, the view gives NULL)
    op_id           BIGINT,    -- framework op (ranges with kind 'op') that launched it, where known; 0: none (as range_id)
    config_id       INTEGER    -- launch_configs.config_id: its kernel name and launch configuration (NULL when neither was recorded)
);

-- Distinct places kernels ran: one row per (run, process, device, context, stream) combination,
-- interned by the writer.
CREATE TABLE lanes (
    lane_id         INTEGER,   -- referenced by kernel_rows.lane_id
    run_id          INTEGER,   -- runs.run_id
    pid             INTEGER,   -- OS process id of the process that recorded the rows
    device_id       INTEGER,   -- CUDA device ordinal as seen by the process (NULL when unknown)
    context_id      INTEGER,   -- CUDA context id
    stream_id       INTEGER    -- CUDA stream id
);

-- Distinct kernels of kernel_rows: one row per combination of kernel name and launch
-- configuration, interned by the writer.
CREATE TABLE launch_configs (
    config_id       INTEGER,   -- referenced by kernel_rows.config_id
    name_id         INTEGER,   -- strings.string_id of the kernel name as recorded
    grid_x          INTEGER,            -- grid dimension x (blocks)
    grid_y          INTEGER,            -- grid dimension y
    grid_z          INTEGER,            -- grid dimension z
    block_x         INTEGER,            -- block dimension x (threads)
    block_y         INTEGER,            -- block dimension y
    block_z         INTEGER,            -- block dimension z
    registers       INTEGER,   -- registers per thread
    static_smem     INTEGER,   -- static shared memory per block, bytes (a Kineto trace says only static plus dynamic: that sum, dynamic_smem NULL)
    dynamic_smem    INTEGER,   -- dynamic shared memory per block, bytes
    graph_id        BIGINT,    -- CUDA graph id when replayed from a graph (NULL otherwise)
    graph_node_id   BIGINT              -- CUDA graph node id when launched from a graph
);

-- One row per memory copy.
CREATE TABLE memcpys (
    run_id          INTEGER,            -- runs.run_id this row belongs to
    pid             INTEGER,            -- OS process id of the process that recorded the row
    device_id       INTEGER,            -- CUDA device ordinal as seen by the process (NULL when unknown)
    context_id      INTEGER,            -- CUDA context id
    stream_id       INTEGER,            -- CUDA stream id
    correlation_id  BIGINT,             -- CUPTI correlation id of the launching API call
    start_ns        BIGINT,             -- start, nanoseconds on the record clock
    end_ns          BIGINT,             -- end, nanoseconds on the record clock
    step            INTEGER,            -- step index the launching call belongs to, NULL when no step claims it
    range_id        BIGINT,             -- innermost range (ranges.range_id) open on the launching thread
    op_id           BIGINT,             -- framework op (ranges with kind 'op') that launched it, where known
    copy_kind       VARCHAR,   -- 'HtoD' | 'DtoH' | 'DtoD' | 'HtoH' | 'PtoP' | 'HtoA' | 'AtoH' | 'AtoA' | 'AtoD' | 'DtoA' | 'unknown'
    src_kind        VARCHAR,   -- source memory: 'pageable' | 'pinned' | 'device' | 'array' | 'managed' | 'device_static' | 'managed_static' | 'unknown'
    dst_kind        VARCHAR,   -- destination memory, same values as src_kind
    bytes           BIGINT,             -- bytes copied
    src_device_id   INTEGER,   -- peer copies only
    dst_device_id   INTEGER,   -- peer copies only
    is_async        BOOLEAN,            -- TRUE for an asynchronous API call (NULL where unknown: imports)
    graph_id        BIGINT,             -- CUDA graph id when launched from a graph (NULL otherwise)
    graph_node_id   BIGINT              -- CUDA graph node id when launched from a graph
);

-- One row per memset.
CREATE TABLE memsets (
    run_id          INTEGER,            -- runs.run_id this row belongs to
    pid             INTEGER,            -- OS process id of the process that recorded the row
    device_id       INTEGER,            -- CUDA device ordinal as seen by the process (NULL when unknown)
    context_id      INTEGER,            -- CUDA context id
    stream_id       INTEGER,            -- CUDA stream id
    correlation_id  BIGINT,             -- CUPTI correlation id of the launching API call
    start_ns        BIGINT,             -- start, nanoseconds on the record clock
    end_ns          BIGINT,             -- end, nanoseconds on the record clock
    step            INTEGER,            -- step index the launching call belongs to, NULL when no step claims it
    range_id        BIGINT,             -- innermost range (ranges.range_id) open on the launching thread
    op_id           BIGINT,             -- framework op (ranges with kind 'op') that launched it, where known
    bytes           BIGINT,             -- bytes set
    value           INTEGER,   -- byte value written (NULL where unknown: Kineto imports)
    memory_kind     VARCHAR,   -- same values as memcpys.src_kind
    graph_id        BIGINT,             -- CUDA graph id when launched from a graph (NULL otherwise)
    graph_node_id   BIGINT              -- CUDA graph node id when launched from a graph
);

-- One row per host-side synchronization (the host waits; start/end are host times).
CREATE TABLE syncs (
    run_id          INTEGER,            -- runs.run_id this row belongs to
    pid             INTEGER,            -- OS process id of the process that recorded the row
    device_id       INTEGER,            -- CUDA device ordinal as seen by the process (NULL when unknown)
    context_id      INTEGER,            -- CUDA context id
    stream_id       INTEGER,   -- NULL for context-wide syncs
    correlation_id  BIGINT,             -- CUPTI correlation id of the launching API call
    start_ns        BIGINT,             -- when the host started waiting
    end_ns          BIGINT,             -- when the host wait returned
    step            INTEGER,            -- step index the launching call belongs to, NULL when no step claims it
    range_id        BIGINT,             -- innermost range (ranges.range_id) open on the launching thread
    op_id           BIGINT,             -- framework op (ranges with kind 'op') that launched it, where known
    sync_type       VARCHAR,   -- 'event_synchronize' | 'stream_wait_event' | 'stream_synchronize' | 'context_synchronize' | 'unknown'
    cuda_event_id   BIGINT     -- event waited on, where applicable
);

-- Runtime and driver API calls on the host.
CREATE TABLE api_call_rows (
    run_id          INTEGER,            -- runs.run_id this row belongs to
    pid             INTEGER,            -- OS process id of the process that recorded the row
    thread_id       BIGINT,    -- OS thread id (CUPTI thread-id type SYSTEM)
    api_kind        VARCHAR,   -- 'runtime' | 'driver'
    cbid            INTEGER,   -- CUPTI callback id (from the trace for Kineto imports; NULL where unknown, e.g. Nsight Systems imports)
    name_id         INTEGER,   -- strings.string_id of the API name, e.g. 'cudaLaunchKernel'
    correlation_id  BIGINT,             -- CUPTI correlation id of the launching API call
    start_ns        BIGINT,             -- start, nanoseconds on the record clock
    end_ns          BIGINT,             -- end, nanoseconds on the record clock
    return_code     INTEGER,   -- CUresult / cudaError_t, 0 = success (NULL where unknown: Kineto imports)
    step            INTEGER,            -- step the call belongs to (NULL when none)
    range_id        BIGINT              -- innermost range open on the calling thread
);

-- NVTX / cuptiprof ranges, framework annotations and CPU ops.
CREATE TABLE range_rows (
    run_id      INTEGER,                -- runs.run_id this row belongs to
    pid         INTEGER,                -- OS process id of the process that recorded the row
    range_id    BIGINT,    -- unique per (run_id, pid); also the CUSTOM2 external correlation id for cuptiprof ranges
    parent_id   BIGINT,    -- enclosing range on the same thread (NULL at top level)
    depth       INTEGER,   -- 0 at top level
    name_id     INTEGER,   -- strings.string_id of the range name / message
    domain      VARCHAR,   -- NVTX domain ('cuptiprof' for cuptiprof.range; NULL for the default domain); for Kineto imports the event's category ('cpu_op', 'user_annotation', 'gpu_user_annotation', 'python_function'), or the domain a cuptiprof Chrome export wrote
    thread_id   BIGINT,                 -- OS thread id (an imported GPU user annotation: its stream, NULL for none, as stream_id of its kernels; attrs holds its device and stream)
    start_ns    BIGINT,                 -- range start on the record clock
    end_ns      BIGINT,    -- NULL when the range never closed (crash)
    kind        VARCHAR,   -- 'warmup' | 'step' | 'user' (other annotations) | 'op' (framework operator, e.g. aten::mm; in an Nsight Systems import, a range torch's emit_nvtx() pushed for one)
    step        INTEGER,   -- step index for kind 'step'; for other kinds the step that encloses them
    attrs       VARCHAR    -- JSON of extra attributes given to cuptiprof.range (NaN, inf: null) / for Kineto imports, a GPU user annotation's device and stream (host events: NULL) / for Nsight Systems imports, the parts torch's emit_nvtx() wrote after the name (seq, op_id, sizes, input_op_ids)
);

-- Python logging records emitted by the profiled program (and cuptiprof's own).
CREATE TABLE logs (
    run_id    INTEGER,                  -- runs.run_id this row belongs to
    pid       INTEGER,                  -- OS process id of the process that recorded the row
    thread_id BIGINT,                   -- OS thread id
    time_ns   BIGINT,    -- on the record clock
    level     VARCHAR,   -- 'DEBUG' | 'INFO' | 'WARNING' | 'ERROR' | 'CRITICAL'
    logger    VARCHAR,                  -- logger name
    message   VARCHAR,                  -- the formatted message
    step      INTEGER                   -- step open when the record was emitted (NULL when none)
);

-- Device memory allocations and frees (CUPTI MEMORY2 / memory pool records).
CREATE TABLE memory_events (
    run_id      INTEGER,                -- runs.run_id this row belongs to
    pid         INTEGER,                -- OS process id of the process that recorded the row
    device_id   INTEGER,                -- CUDA device ordinal as seen by the process (NULL when unknown)
    time_ns     BIGINT,                 -- when it happened, nanoseconds on the record clock
    operation   VARCHAR,   -- 'alloc' | 'free'
    bytes       BIGINT,    -- size of the allocation (positive for both operations)
    address     UBIGINT,                -- device address
    memory_kind VARCHAR,   -- 'device' | 'pinned' | 'managed' | ...
    pool        BOOLEAN,   -- TRUE for memory-pool (stream-ordered allocator) operations
    correlation_id BIGINT,              -- CUPTI correlation id of the allocating call
    step        INTEGER                 -- step of the call that allocated/freed (NULL when none)
);

-- What the data does NOT contain. Stored, never hidden: reports print these.
-- 'unclaimed_records' counts every GPU row with a NULL step, warm-up work among them (work a
-- warm-up step launched while another thread's recorded step had collection on, or work launched
-- in no range while a warm-up step was open and no recorded step took it by the rule for `step`
-- above): compare and diff leave such work aside in their
-- note about work outside the steps (launched inside a range that began in a warm-up range, or by
-- a call that began while a warm-up range of its process was open).
CREATE TABLE data_quality (
    run_id    INTEGER,                  -- runs.run_id this row belongs to
    pid       INTEGER,                  -- OS process id of the process that recorded the row
    check_name VARCHAR,  -- 'dropped_records' | 'unclaimed_records' | 'missing_kind' | 'empty_step' | 'step_incomplete' | 'steps_mixed' | 'unknown_category' | 'processes_merged' | 'no_gpu' | 'cupti_overhead' | 'untimed_records' | 'decode_error' | 'process_ended_early' | 'run_recovered' | 'range_thread_switch' | 'ranges_interleaved' | 'out_of_range_args' | 'process_exec' | 'steps_short' | 'ranges_disabled' | 'range_filter_failed' | 'cpu_profiler_failed' | 'unreadable_part' | 'cupti_error' | 'cupti_unavailable' | 'subscriber_conflict' | 'clock_unaligned'
    subject   VARCHAR,   -- what it is about: an activity kind, a step index, a category name
    count     BIGINT,    -- number of records concerned
    value_ns  BIGINT,    -- a duration where that makes sense (e.g. CUPTI overhead), else NULL
    detail    VARCHAR    -- one readable sentence
);

-- GPU busy time per step, stored so that reports need not fold every row: written when a writer
-- closes (and by merge) for each run listed in step_busy_runs. A run missing there (its writer
-- died) has its busy time computed from the rows when a report needs it.
CREATE TABLE step_busy (
    run_id    INTEGER,   -- runs.run_id this row belongs to
    pid       INTEGER,   -- OS process id
    device_id INTEGER,   -- CUDA device ordinal (NULL for rows whose device is unknown)
    step      INTEGER,   -- step index (NULL: work that no step claims)
    busy_ns   BIGINT,    -- union of the work intervals (kernels, memcpys, memsets) across streams
    start_ns  BIGINT,    -- first start of that work
    end_ns    BIGINT     -- last end of that work
);

CREATE TABLE step_busy_runs (
    run_id    INTEGER    -- a run whose step_busy rows are complete
);

-- Views ------------------------------------------------------------------------------------

-- One row per kernel execution: kernel_rows with where it ran (lanes), its name (strings) and its
-- launch configuration (launch_configs) joined back. range_id and op_id are NULL where none.
CREATE VIEW kernels AS
SELECT l.run_id, l.pid, l.device_id, l.context_id, l.stream_id,  -- where it ran: as in lanes
       k.correlation_id,
       k.start_ns, k.end_ns, k.step, nullif(k.range_id, 0) AS range_id, nullif(k.op_id, 0) AS op_id,
       s.value AS name,                                -- kernel name as recorded (mangled for C++)
       coalesce(s.demangled, s.value) AS demangled,    -- readable name
       c.grid_x, c.grid_y, c.grid_z, c.block_x, c.block_y, c.block_z,  -- as in launch_configs
       c.registers, c.static_smem, c.dynamic_smem, c.graph_id, c.graph_node_id,  -- as in launch_configs
       c.name_id   -- strings.string_id of the kernel name (launch_configs.name_id): one integer per distinct name, a cheaper key than the name to group on
FROM kernel_rows k JOIN lanes l ON l.lane_id = k.lane_id
LEFT JOIN launch_configs c ON c.config_id = k.config_id
LEFT JOIN strings s ON s.string_id = c.name_id;

CREATE VIEW api_calls AS
SELECT a.run_id, a.pid, a.thread_id, a.api_kind, a.cbid, s.value AS name,  -- name: the API name, e.g. 'cudaLaunchKernel'
       a.correlation_id,
       a.start_ns, a.end_ns, a.return_code, a.step, a.range_id
FROM api_call_rows a LEFT JOIN strings s ON s.string_id = a.name_id;

CREATE VIEW ranges AS
SELECT r.run_id, r.pid, r.range_id, r.parent_id, r.depth, s.value AS name,  -- name: the range name / message
       r.domain, r.thread_id,
       r.start_ns, r.end_ns, r.kind, r.step, r.attrs
FROM range_rows r LEFT JOIN strings s ON s.string_id = r.name_id;

-- Every GPU activity in one relation. `kind` is 'kernel' | 'memcpy' | 'memset' | 'sync';
-- `name` is the readable op name: the demangled kernel name, 'Memcpy HtoD', 'Memset',
-- 'Sync stream_synchronize'. `bytes` is the size of a copy or memset (NULL for kernels and
-- syncs). `name_id` is the kernel's name id, as in the kernels view (NULL for the other kinds).
-- The other columns are those of the tables. Sync rows are host-side waits, not GPU work.
CREATE VIEW gpu_activities AS
SELECT 'kernel' AS kind, run_id, pid, device_id, context_id, stream_id, correlation_id,
       start_ns, end_ns, step, range_id, op_id, demangled AS name, NULL::BIGINT AS bytes, name_id
FROM kernels
UNION ALL
SELECT 'memcpy', run_id, pid, device_id, context_id, stream_id, correlation_id,
       start_ns, end_ns, step, range_id, op_id, 'Memcpy ' || copy_kind, bytes, NULL
FROM memcpys
UNION ALL
SELECT 'memset', run_id, pid, device_id, context_id, stream_id, correlation_id,
       start_ns, end_ns, step, range_id, op_id, 'Memset', bytes, NULL
FROM memsets
UNION ALL
SELECT 'sync', run_id, pid, device_id, context_id, stream_id, correlation_id,
       start_ns, end_ns, step, range_id, op_id, 'Sync ' || sync_type, NULL, NULL
FROM syncs;
