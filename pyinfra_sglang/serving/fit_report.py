"""The fit of a placed profile, in numbers, for a model that fits as for one that does not:
per GPU the weights, the KV cache floor, the overhead, and what is left of SGLang's static
budget; the KV tokens that budget holds, and the requests of a full context they make.

SGLang sizes its KV pool from what the static part of each GPU's memory keeps after the
weights (its pool configurator: available bytes // bytes a token): so the tokens here are
what the server would report as max_total_num_tokens, to the overhead's precision.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra_sglang.serving import memory_fit
from pyinfra_sglang.serving.memory_fit import GIB, GpuNeed
from pyinfra_sglang.serving.profiles import Profile


@dataclass(frozen=True)
class FitReport:
    model: str
    gpus: int  # the GPUs the server uses (tensor-parallel size)
    gpu_memory_gb: float
    need: GpuNeed
    kv_bytes_per_gpu_token: float
    context_length: int | None

    @property
    def free_gib(self) -> float:
        """What each GPU's static budget keeps beyond the need (negative: short by)."""
        return self.need.budget - self.need.need

    @property
    def kv_tokens(self) -> int:
        """The KV tokens the budget holds after weights and overhead (SGLang's pool)."""
        room = self.need.budget - self.need.weights_gib - self.need.overhead_gib
        room -= self.need.mtp_gib
        if room <= 0 or self.kv_bytes_per_gpu_token <= 0:
            return 0
        return int(room * GIB / self.kv_bytes_per_gpu_token)

    @property
    def full_context_requests(self) -> float | None:
        if not self.context_length:
            return None
        return self.kv_tokens / self.context_length

    def line(self) -> str:
        need = self.need
        verdict = "fits" if need.fits else "does not fit"
        text = (
            f"{self.model} {verdict} {self.gpus} x {self.gpu_memory_gb:g} GB at tensor-parallel "
            f"size {need.tp_size}: per GPU {need.need:.1f} of {need.budget:.1f} GiB "
            f"({need.parts()}), {self.free_gib:+.1f} GiB free"
        )
        if need.fits and self.kv_bytes_per_gpu_token:
            text += f"; the KV cache holds {self.kv_tokens:,} tokens"
            if self.full_context_requests is not None:
                text += (
                    f", {self.full_context_requests:.1f} requests of the full "
                    f"{self.context_length:,}-token context"
                )
        return text

    def as_dict(self) -> dict:
        need = self.need
        return {
            "model": self.model,
            "fits": need.fits,
            "tp_size": need.tp_size,
            "gpus": self.gpus,
            "gpu_memory_gb": self.gpu_memory_gb,
            "mem_fraction_static": need.fraction,
            "budget_gib": round(need.budget, 2),
            "weights_gib": round(need.weights_gib, 2),
            "kv_floor_tokens": need.kv_tokens,
            "kv_floor_gib": round(need.kv_gib, 2),
            "overhead_gib": round(need.overhead_gib, 2),
            "mtp_gib": round(need.mtp_gib, 2),
            "need_gib": round(need.need, 2),
            "free_gib": round(self.free_gib, 2),
            "kv_tokens": self.kv_tokens,
            "context_length": self.context_length,
            "full_context_requests": (
                round(self.full_context_requests, 2)
                if self.full_context_requests is not None
                else None
            ),
        }


def fit_report(profile: Profile, tp_size: int, gpu_memory_gb: float) -> FitReport | None:
    """The fit of ``profile`` at ``tp_size`` on GPUs of ``gpu_memory_gb``; None for a profile
    that states no model size (a plain floor, min_total_gpu_memory_gb)."""
    need = memory_fit.per_gpu_need(profile, tp_size, gpu_memory_gb)
    if need is None:
        return None
    return FitReport(
        model=profile.model,
        gpus=tp_size,
        gpu_memory_gb=gpu_memory_gb,
        need=need,
        kv_bytes_per_gpu_token=memory_fit.kv_bytes_per_gpu_token(profile, tp_size),
        context_length=profile.context_length,
    )
