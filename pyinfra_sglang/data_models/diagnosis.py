"""The model of pyinfra_sglang/data/diagnosis.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel, Number


class DiagnosisBusy(DataModel):
    gpu_util_pct: Number
    share: Number
    active_gpu_util_pct: Number


class DiagnosisCompute(DataModel):
    min_mem_util_pct: Number
    min_power_fraction: Number
    max_clock_fraction: Number


class DiagnosisMemoryBandwidth(DataModel):
    mem_util_pct: Number


class DiagnosisLink(DataModel):
    saturated_fraction: Number
    share: Number
    idle_fraction: Number
    idle_gbs: Number


class DiagnosisHost(DataModel):
    busy_process_cpu_pct: Number


class DiagnosisMemoryCapacity(DataModel):
    kv_cache_usage: Number
    queued_requests: int


class DiagnosisBandwidth(DataModel):
    low_fraction: Number


class DiagnosisLimits(DataModel):
    max_file_bytes: int
    max_json_depth: int
    max_samples: int
    max_gpus: int
    max_readings: int
    max_steps: int
    max_bench_rows: int
    max_concurrency: int
    max_journal_bytes: int
    max_journal_rounds: int
    max_number: Number


class DiagnosisServer(DataModel):
    kv_full: Number
    cached_share: Number
    growth_min: Number


class Diagnosis(DataModel):
    busy: DiagnosisBusy
    compute: DiagnosisCompute
    memory_bandwidth: DiagnosisMemoryBandwidth
    link: DiagnosisLink
    host: DiagnosisHost
    memory_capacity: DiagnosisMemoryCapacity
    bandwidth: DiagnosisBandwidth
    limits: DiagnosisLimits
    server: DiagnosisServer
