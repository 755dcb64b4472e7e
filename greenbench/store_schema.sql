-- greenbench results database, schema version 1 (the contract between the launcher, which
-- writes, and the dashboard / compare / report, which read). Times are UTC.

CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER NOT NULL,
    applied_at  TIMESTAMP NOT NULL
);

CREATE TABLE IF NOT EXISTS runs (
    run_id          VARCHAR PRIMARY KEY,  -- 12 hex chars
    suite           VARCHAR,              -- suite name, or NULL for `run --workload`
    workload        VARCHAR NOT NULL,     -- e.g. 'transformer-vs-mamba'
    config_name     VARCHAR NOT NULL,     -- human label, e.g. 'transformer/tiny seq=1024 single×1'
    config_key      VARCHAR NOT NULL,     -- hash of the config that defines "same configuration"
    config          JSON NOT NULL,        -- the full RunSpec
    model_family    VARCHAR NOT NULL,
    model_size      VARCHAR NOT NULL,
    strategy        VARCHAR NOT NULL,     -- single | ddp | fsdp | odc | hybrid | pipeline | skippipe
    layout          VARCHAR NOT NULL,     -- e.g. 'dp1' or 'dp2-tp2-pp1-cp1'
    device          VARCHAR NOT NULL,     -- cpu | cuda
    device_type     VARCHAR NOT NULL,     -- 'cpu:<model name>' or GPU name, e.g. 'NVIDIA H100 80GB HBM3'
    nproc           INTEGER NOT NULL,     -- ranks per node
    nnodes          INTEGER NOT NULL,
    precision       VARCHAR NOT NULL,     -- fp32 | bf16
    seq_len         INTEGER NOT NULL,
    lengths         VARCHAR NOT NULL,     -- fixed | uniform | longalign | swe-smith
    energy_source   VARCHAR,              -- nvml | zeus | rapl | estimate
    energy_measured BOOLEAN,
    peak_flops      DOUBLE,               -- FLOP/s per device used for MFU
    peak_flops_source VARCHAR,            -- 'datasheet:H100 SXM bf16' | 'cpu-gemm-calibration' | NULL
    region          VARCHAR,              -- carbon region (ISO-3 or cloud region)
    carbon_intensity_g_per_kwh DOUBLE,
    status          VARCHAR NOT NULL,     -- running | ok | failed | interrupted
    error           VARCHAR,
    failed_rank     INTEGER,
    label           VARCHAR,              -- --label given at run time
    git_sha         VARCHAR,
    started_at      TIMESTAMP NOT NULL,
    finished_at     TIMESTAMP,
    host            VARCHAR,
    hardware        JSON,                 -- cpu model, cores, gpu names, driver, memory
    versions        JSON                  -- python, torch, transformers, greenbench, …
);

CREATE TABLE IF NOT EXISTS results (
    run_id          VARCHAR NOT NULL,
    repeat          INTEGER NOT NULL,
    tokens          BIGINT NOT NULL,
    seconds         DOUBLE NOT NULL,
    tokens_per_s    DOUBLE NOT NULL,
    energy_source   VARCHAR NOT NULL,
    energy_measured BOOLEAN NOT NULL,
    energy_j        DOUBLE,               -- gross
    energy_net_j    DOUBLE,               -- gross − idle power × seconds
    energy_gpu_j    DOUBLE,
    energy_cpu_j    DOUBLE,
    energy_dram_j   DOUBLE,
    idle_power_w    DOUBLE,
    joules_per_token DOUBLE,
    net_joules_per_token DOUBLE,
    flops           DOUBLE,
    mfu             DOUBLE,
    peak_mem_bytes  BIGINT,
    step_time_p50_s DOUBLE,
    step_time_p95_s DOUBLE,
    wait_fraction   DOUBLE,
    wait_energy_j   DOUBLE,
    co2_g           DOUBLE,
    loss            DOUBLE,
    energy_note     VARCHAR,
    step_times_s    JSON,                 -- raw per-step times of the window
    PRIMARY KEY (run_id, repeat)
);

CREATE TABLE IF NOT EXISTS rank_results (
    run_id          VARCHAR NOT NULL,
    repeat          INTEGER NOT NULL,
    rank            INTEGER NOT NULL,
    local_rank      INTEGER NOT NULL,
    host            VARCHAR,
    tokens          BIGINT,
    seconds         DOUBLE,
    compute_s       DOUBLE,
    comm_s          DOUBLE,
    wait_s          DOUBLE,
    peak_mem_bytes  BIGINT,
    flops           DOUBLE,
    loss            DOUBLE,
    n_microbatches  INTEGER,
    energy_source   VARCHAR,
    energy_j        DOUBLE,
    energy_gpu_j    DOUBLE,
    energy_cpu_j    DOUBLE,
    energy_dram_j   DOUBLE,
    energy_note     VARCHAR,
    energy_measured BOOLEAN,              -- the rank's EnergyWindow.measured (NULL: no window)
    energy_seconds  DOUBLE,               -- the rank's EnergyWindow.seconds
    step_times_s    JSON,                 -- this rank's raw per-step times of the window
    PRIMARY KEY (run_id, repeat, rank)
);

CREATE TABLE IF NOT EXISTS power_samples (
    run_id     VARCHAR NOT NULL,
    repeat     INTEGER NOT NULL,
    rank       INTEGER NOT NULL,
    t_s        DOUBLE NOT NULL,
    power_w    DOUBLE NOT NULL,
    component  VARCHAR NOT NULL
);
