"""Decode roofline: the most tokens/s batch-1 decode can reach, and how close a run came.

At batch 1 every generated token reads all active weights from GPU memory once; with tensor
parallelism each GPU reads its share at the same time. So tokens/s <= aggregate memory bandwidth
/ bytes per token. KV cache and activation reads are left out: they only lower the true limit,
so this stays an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra_sglang.gpus import gpu_by_name
from pyinfra_sglang.serving.profiles import Profile


@dataclass(frozen=True)
class DecodeRoofline:
    tp_size: int
    memory_bandwidth_gbs: float  # per GPU
    active_params_b: float
    bytes_per_param: float

    @property
    def aggregate_bandwidth_gbs(self) -> float:
        return self.tp_size * self.memory_bandwidth_gbs

    @property
    def gb_per_token(self) -> float:
        return self.active_params_b * self.bytes_per_param

    @property
    def tokens_per_s(self) -> float:
        return self.aggregate_bandwidth_gbs / self.gb_per_token

    def fraction(self, measured_tokens_per_s: float) -> float:
        """Share of the bound a measured single-stream decode rate reached."""
        return measured_tokens_per_s / self.tokens_per_s

    def as_dict(self) -> dict:
        return {
            "tp_size": self.tp_size,
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs,
            "active_params_b": self.active_params_b,
            "bytes_per_param": self.bytes_per_param,
            "gb_per_token": round(self.gb_per_token, 3),
            "bound_tokens_per_s": round(self.tokens_per_s, 1),
        }


def stream_rate(row: dict) -> float | None:
    """One stream's decode tokens/s in a bench_serving row: 1000 / median TPOT (at concurrency
    1 also the output throughput)."""
    tpot = row.get("median_tpot_ms")
    if tpot and tpot > 0:
        return 1000 / tpot
    if row.get("max_concurrency") == 1:
        return row.get("output_throughput")
    return None


def roofline_for(profile: Profile, gpu_name: str, tp_size: int) -> DecodeRoofline:
    """The roofline of ``profile`` served on ``tp_size`` GPUs named ``gpu_name`` (gpus.toml).
    ValueError when the profile lacks active_params_b or bytes_per_param."""
    missing = [f for f in ("active_params_b", "bytes_per_param") if getattr(profile, f) is None]
    if missing:
        raise ValueError(
            f"profile {profile.name} has no {' or '.join(missing)}: set them in the profile "
            "(or sglang_profile_overrides) to get a decode roofline"
        )
    if tp_size < 1:
        raise ValueError(f"tensor-parallel size must be 1 or more, not {tp_size}")
    return DecodeRoofline(
        tp_size=tp_size,
        memory_bandwidth_gbs=gpu_by_name(gpu_name).memory_bandwidth_gbs,
        active_params_b=profile.active_params_b,
        bytes_per_param=profile.bytes_per_param,
    )
