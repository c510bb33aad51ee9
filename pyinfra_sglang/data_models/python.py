"""The model of pyinfra_sglang/data/python.toml."""

from __future__ import annotations

from pyinfra_sglang.data_models.base import DataModel, Number, Release


class Uv(DataModel):
    version: str
    prefix: str


class Venv(DataModel):
    root: str
    name: str
    keep: int
    python: str


class Torch(DataModel):
    index_base: str
    # CUDA version (nvidia.toml cuda_versions) -> PyTorch's wheel tag.
    cuda_tag: dict[str, str]
    # Wheel tag -> the first torch release PyTorch built for it.
    first_release: dict[str, str]


class Kernel(DataModel):
    index_base: str


class Stack(DataModel):
    """What one SGLang release installs beside itself (read from its wheel)."""

    sglang: Release
    torch: str
    torchvision: str
    torchaudio: str
    kernel: str
    kernel_version: str
    kernel_cuda: int


class Stacks(DataModel):
    stacks: tuple[Stack, ...]


class FlashAttnNeed(DataModel):
    fa3_native_majors: tuple[int, ...]
    fallback_backends: tuple[str, ...]


class FlashAttn(DataModel):
    version: str
    build_requirements: tuple[str, ...]
    gb_per_nvcc_thread: Number
    max_nvcc_threads: int
    default_cuda_archs: tuple[str, ...]
    memory_fraction: Number
    log_dir: str
    wheel_dir: str
    build_unit: str
    progress_every_s: Number
    poll_every_s: Number
    tail_lines: int
    need: FlashAttnNeed


class RouterPin(DataModel):
    sglang: Release
    package: str
    router: Release


class PythonRouter(DataModel):
    pins: tuple[RouterPin, ...]


class Python(DataModel):
    uv: Uv
    venv: Venv
    torch: Torch
    kernel: Kernel
    sglang: Stacks
    flash_attn: FlashAttn
    router: PythonRouter
