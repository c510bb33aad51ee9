"""Is flash-attn built on this host, and why: the inventory's flash_attn_build, else what
the profile needs on the host's GPUs (pyinfra_sglang/serving/flash_attn_need.py). Read by
the flash-attn role, the host-driver planning and the audit alike."""

from __future__ import annotations

from pyinfra import host

from checks.facts import NvidiaGpus, read_once
from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.python_env.flash_attn_build_plan import archs_from_compute_caps
from pyinfra_sglang.serving.flash_attn_need import FlashAttnNeed, as_set, flash_attn_need
from pyinfra_sglang.serving.host_profile import host_profile
from pyinfra_sglang.serving.service_files import planned_gpu


def gpu_archs() -> tuple[str, ...]:
    """The CUDA architectures of the GPUs nvidia-smi reports ("90", "120")."""
    gpus = read_once(host, NvidiaGpus)
    return archs_from_compute_caps([gpu["compute_cap"] or "" for gpu in gpus])


def flash_attn_decision(config: HostConfig) -> FlashAttnNeed:
    """The architectures judged: flash_attn_cuda_archs, else those nvidia-smi reports, else
    (before the driver is in) the planned GPU's (expected_gpu_model). A flash_attn_build the
    inventory sets reads nothing."""
    if config.flash_attn_build is not None:
        return as_set(config.flash_attn_build)
    profile = host_profile(config)
    archs = list(config.flash_attn_cuda_archs or gpu_archs())
    if not archs:
        spec = planned_gpu(profile, config.expected_gpu_model)
        archs = [spec.arch] if spec else []
    return flash_attn_need(config.flash_attn_build, profile, archs)
