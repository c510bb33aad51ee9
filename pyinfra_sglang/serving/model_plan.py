"""The fit of a model on a set of GPUs, layout by layout: what `pyinfra-sglang plan` prints.

Each tensor-parallel size the model's heads allow, up to the GPUs given; for an MoE model
also with expert parallelism and with DP attention at that size, where the SGLang release
takes the layout (parallelism.py). Per layout: the per-GPU fit (fit_report.py), the KV
tokens the rest of the budget holds, the requests of a full context they make, and the batch-1
decode roofline (roofline.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang.gpus import GpuSpec
from pyinfra_sglang.serving import parallelism
from pyinfra_sglang.serving.fit_report import FitReport, fit_report
from pyinfra_sglang.serving.placement import profile_for_gpus
from pyinfra_sglang.serving.profiles import Profile, allowed_tp_sizes, merge_overrides
from pyinfra_sglang.serving.roofline import DecodeRoofline


@dataclass(frozen=True)
class LayoutFit:
    """One layout of the model on the GPUs: its fit, or why SGLang refuses it."""

    tp_size: int
    ep_size: int | None
    dp_attention_size: int | None
    report: FitReport | None
    refused: str | None = None
    decode_tokens_per_s: float | None = None  # the batch-1 roofline

    @property
    def name(self) -> str:
        name = f"TP {self.tp_size}"
        if self.ep_size:
            name += f" EP {self.ep_size}"
        if self.dp_attention_size:
            name += f" DP-attention {self.dp_attention_size}"
        return name

    @property
    def fits(self) -> bool:
        return self.refused is None and self.report is not None and self.report.need.fits

    def as_dict(self) -> dict:
        return {
            "layout": self.name,
            "tp_size": self.tp_size,
            "ep_size": self.ep_size,
            "dp_attention_size": self.dp_attention_size,
            "fits": self.fits,
            "refused": self.refused,
            "fit": self.report.as_dict() if self.report else None,
            "decode_roofline_tokens_per_s": (
                round(self.decode_tokens_per_s, 1) if self.decode_tokens_per_s else None
            ),
        }


def _layouts(profile: Profile, tp_size: int) -> list[tuple[int | None, int | None]]:
    """(ep_size, dp_attention_size) to try at ``tp_size``: plain tensor parallelism, and for
    an MoE model experts and attention spread the other ways."""
    plain = [(profile.ep_size, profile.dp_attention_size)]
    if not profile.num_routed_experts or tp_size == 1:
        return plain
    return [*plain, (tp_size, None), (None, tp_size)]


def plan_layouts(
    profile: Profile, gpu: GpuSpec, gpu_count: int, sglang_version: str
) -> list[LayoutFit]:
    """Every layout of ``profile`` on up to ``gpu_count`` GPUs ``gpu``, fewest GPUs first;
    GpuFitError where the GPU's architecture cannot run the profile at all."""
    resolved = profile_for_gpus(profile, gpu.arch, sglang_version)
    sizes = allowed_tp_sizes(resolved, gpu_count) or list(range(1, gpu_count + 1))
    fits = []
    for tp_size in sizes:
        for ep_size, dp_size in _layouts(resolved, tp_size):
            values = {"tp_size": tp_size, "ep_size": ep_size, "dp_attention_size": dp_size}
            try:
                laid_out = merge_overrides(resolved, values)
            except PyinfraError as error:
                fits.append(LayoutFit(tp_size, ep_size, dp_size, None, str(error)))
                continue
            problems = parallelism.layout_problems(laid_out, tp_size, sglang_version, gpu.arch)
            report = fit_report(laid_out, tp_size, float(gpu.memory_gb))
            roofline = None
            if laid_out.active_params_b and laid_out.bytes_per_param:
                roofline = DecodeRoofline(
                    tp_size,
                    float(gpu.memory_bandwidth_gbs),
                    laid_out.active_params_b,
                    laid_out.bytes_per_param,
                ).tokens_per_s
            refused = "; ".join(problems) or None
            fits.append(LayoutFit(tp_size, ep_size, dp_size, report, refused, roofline))
    return fits
