"""Where a profile runs and how: ``place(profile, gpus, node, sglang_version)`` answers once,
for one node of a server, and the answer travels as a ``Placement``: the profile as it runs on
these GPUs (its [arch.*] table applied, its backends allowed there), the tensor-parallel size
and the MoE layout. Render, validation, the CLI, the benchmark record and the tuner take the
Placement; none of them works it out again.

The refusals come in this order, each naming what is allowed: the architecture and the
release (profile_for_gpus), the layout SGLang would refuse, the fit over all the GPUs, the
tensor-parallel size the heads allow, the fit at that size.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang.arch import Arch, as_sm
from pyinfra_sglang.gpu_links.p2p import PeerPath
from pyinfra_sglang.serving import memory_fit, parallelism
from pyinfra_sglang.serving.attention_backends import (
    backend_problems,
    check_release_for_arch,
    refusal,
)
from pyinfra_sglang.serving.layout import Layout, layout_of
from pyinfra_sglang.serving.profiles import (
    Profile,
    allowed_tp_sizes,
    heads_text,
    tp_size_allowed,
)
from pyinfra_sglang.serving.sglang_flags import FlagVersionError
from pyinfra_sglang.versions import parse_version


class GpuFitError(PyinfraError):
    """The GPUs cannot run the profile: too little memory in total, or the wrong arch."""


class TensorParallelError(GpuFitError):
    """A tensor-parallel size the model's heads cannot be split over. ``from_profile``: the
    size is the profile's tp_size (else it is the GPU count)."""

    def __init__(self, message: str, from_profile: bool = False):
        super().__init__(message)
        self.from_profile = from_profile


@dataclass(frozen=True)
class GpuSet:
    """The GPUs of one node as rendering needs them."""

    count: int
    memory_gb: float  # the smallest GPU's
    arch: str | None = None  # sm_120, or 12.0 as nvidia-smi says; None: no arch check
    pcie_only: bool = False  # several GPUs, none NVLinked: NCCL hints go into the env file
    # The widest path between two GPUs in `nvidia-smi topo -m` (PIX, PXB, PHB, NODE, SYS);
    # None when not read. It sets NCCL_P2P_LEVEL on PCIe-only hosts.
    widest_path: str | None = None
    # What the host allows for peer traffic (P2P status, ACS, IOMMU, VM); None: not read
    # from a host (planning, `render`): the level follows the topology alone.
    peer: PeerPath | None = None


@dataclass(frozen=True)
class NodePosition:
    """Where a node stands in its multi-node group (a single node by default)."""

    nnodes: int = 1
    rank: int = 0
    dist_init_addr: str | None = None  # HEAD:PORT, the same on every node


def check_min_version(profile: Profile, sglang_version: str) -> None:
    if profile.min_sglang_version is None:
        return
    if parse_version(sglang_version) < parse_version(profile.min_sglang_version):
        raise FlagVersionError(
            f"profile {profile.name} needs SGLang {profile.min_sglang_version} or later; "
            f"the pinned release is {sglang_version}"
        )


def fewest_gpus_for(profile: Profile, gpu_memory_gb: float | None, at_least: int = 1) -> int | None:
    """The fewest GPUs, ``at_least`` of them, that hold the profile on GPUs of
    ``gpu_memory_gb`` (None: memory not counted) at a tensor-parallel size its heads allow
    (any count where the profile leaves the heads unset); None when no such size exists."""
    if gpu_memory_gb is not None and gpu_memory_gb <= 0:
        return None
    count = at_least
    if gpu_memory_gb is not None:
        fewest = memory_fit.fewest_holding(profile, gpu_memory_gb, at_least)
        if fewest is None:
            return None
        count = fewest
    heads, kv = profile.num_attention_heads, profile.num_key_value_heads
    if heads is None and kv is None:
        return count
    # No size above the attention heads divides them; with KV heads alone, a multiple of
    # them comes within kv of any count. More GPUs never need more memory each.
    limit = heads if heads is not None else count + (kv or 0)
    return next((n for n in range(count, limit + 1) if tp_size_allowed(profile, n)), None)


def check_fit(profile: Profile, gpu_count: int, gpu_memory_gb: float) -> None:
    """Raise GpuFitError when ``gpu_count`` GPUs of ``gpu_memory_gb``, one tensor-parallel
    rank each, cannot hold the profile's model: per GPU, its share of the weights, the KV
    cache and the overhead against mem_fraction_static (memory_fit.py), or the profile's
    plain floor over all GPUs. The GPU count it suggests is one the model's heads can be
    split over (tensor parallelism), where the profile names them."""
    if memory_fit.holds(profile, gpu_count, gpu_memory_gb):
        return
    gpus_needed = fewest_gpus_for(profile, gpu_memory_gb)
    if gpus_needed is None:
        more = "GPUs"
    elif profile.num_attention_heads is None and profile.num_key_value_heads is None:
        more = f"at least {gpus_needed} GPUs of {gpu_memory_gb:g} GB"
    else:
        sizes = ", ".join(str(n) for n in allowed_tp_sizes(profile) if n >= gpus_needed)
        more = (
            f"{gpus_needed} GPUs of {gpu_memory_gb:g} GB (tensor parallelism needs a GPU "
            f"count that splits {heads_text(profile)}; {sizes} hold it)"
        )
    raise GpuFitError(
        f"profile {profile.name} {memory_fit.shortfall(profile, gpu_count, gpu_memory_gb)}. "
        f"Use {more}, larger GPUs, or a profile for a smaller model"
    )


def check_arch(profile: Profile, arch: Arch | str) -> None:
    """Raise GpuFitError when the profile names the GPU archs it runs on and ``arch`` (any
    spelling: sm_120, 120, 12.0) is not one of them."""
    if profile.archs is not None and as_sm(arch) not in profile.archs:
        raise GpuFitError(
            f"profile {profile.name} runs on {', '.join(profile.archs)}; these GPUs are "
            f"{as_sm(arch) or 'of an architecture nvidia-smi does not report'}. Use GPUs of "
            "those architectures or another profile"
        )


def profile_for_gpus(profile: Profile, arch: Arch | str | None, sglang_version: str) -> Profile:
    """The profile as it runs on GPUs of ``arch`` (any spelling) with ``sglang_version``: the
    architecture allowed, its [arch.*] table applied, its sparse-attention backends ones
    whose kernels run there (GpuFitError, FlagVersionError otherwise). Unchanged when
    ``arch`` is None."""
    if arch is None:
        return profile
    sm = as_sm(arch)
    check_arch(profile, sm)
    check_min_version(profile, sglang_version)
    check_release_for_arch(profile, sm, sglang_version)
    resolved = profile.for_arch(sm)
    problems = backend_problems(resolved, sm, sglang_version)
    if problems:
        raise GpuFitError(refusal(profile, sm, sglang_version, problems))
    return resolved


def _one_of_sizes(sizes: list[int]) -> str:
    return str(sizes[0]) if len(sizes) == 1 else "one of " + ", ".join(map(str, sizes))


def tp_size_for(
    profile: Profile, gpu_count: int, nnodes: int = 1, gpu_memory_gb: float | None = None
) -> int:
    """Tensor-parallel size: the profile's, else one rank per GPU over all nodes. Refused
    (TensorParallelError) when the model's heads cannot be split over it, naming the sizes
    that can, up to the GPU count (of those, the ones that hold the profile when
    ``gpu_memory_gb`` is given)."""
    total = gpu_count * nnodes
    if profile.tp_size is not None and profile.tp_size > total:
        raise GpuFitError(
            f"profile {profile.name} sets tp_size {profile.tp_size}, but there are only "
            f"{total} GPUs ({nnodes} node(s) x {gpu_count})"
        )
    size = total if profile.tp_size is None else profile.tp_size
    if tp_size_allowed(profile, size):
        return size
    divisors = allowed_tp_sizes(profile, total)
    fitting = divisors
    if gpu_memory_gb is not None:
        fitting = [n for n in divisors if memory_fit.holds(profile, n, gpu_memory_gb)]
    fewest = fewest_gpus_for(profile, gpu_memory_gb, total + 1)
    more = f"use {fewest} GPUs" if fewest else "use larger GPUs"
    if profile.tp_size is None:
        what = (
            f"runs one tensor-parallel rank per GPU, {total} here ({nnodes} node(s) x {gpu_count})"
        )
    else:
        what = f"sets tp_size {size}"
    if fitting:
        fix = f"set tp_size (sglang_profile_overrides) to {_one_of_sizes(fitting)}, or {more}"
    else:
        largest = divisors[-1]
        fix = (
            f"none of them holds the profile on {gpu_memory_gb:g} GB GPUs (at "
            f"{largest}, it {memory_fit.shortfall(profile, largest, gpu_memory_gb)}): {more}"
        )
    raise TensorParallelError(
        f"profile {profile.name} {what}, but {heads_text(profile)} do not split over "
        f"{size} ranks (the sizes that do, up to {total} GPUs: "
        f"{', '.join(map(str, divisors))}); {fix}",
        from_profile=profile.tp_size is not None,
    )


class LayoutError(TensorParallelError):
    """An expert-parallel, DP-attention or all-to-all choice SGLang refuses at this
    tensor-parallel size, release or GPU architecture: the profile's choice (from_profile),
    so a refusal names the profile's field."""

    def __init__(self, message: str):
        super().__init__(message, from_profile=True)


def check_layout(profile: Profile, tp_size: int, sglang_version: str, arch: str | None) -> None:
    """Raise LayoutError naming what is allowed when SGLang would refuse (or silently change)
    the profile's MoE layout at ``tp_size`` (data/parallelism.toml)."""
    problems = parallelism.layout_problems(profile, tp_size, sglang_version, arch)
    if problems:
        raise LayoutError(
            f"profile {profile.name} at tensor-parallel size {tp_size} (SGLang "
            f"{sglang_version}): " + "; ".join(problems)
        )


@dataclass(frozen=True)
class Placement:
    """How one node of a server runs its profile: made by ``place()`` only."""

    profile: Profile  # as it runs on these GPUs: [arch.*] applied
    tp_size: int
    layout: Layout
    gpus: GpuSet
    node: NodePosition
    sglang_version: str

    @property
    def total_gpus(self) -> int:
        return self.gpus.count * self.node.nnodes


def place(
    profile: Profile,
    gpus: GpuSet,
    node: NodePosition = NodePosition(),
    sglang_version: str = "",
) -> Placement:
    """The Placement of ``profile`` on ``gpus`` (one node's; ``node``: where the node stands
    in its group) with ``sglang_version``, or the first refusal (GpuFitError and its
    subclasses, FlagVersionError) naming what is allowed."""
    if not sglang_version:  # a default only so that node may stay unnamed
        raise ValueError("place() needs the SGLang release the server runs")
    resolved = profile_for_gpus(profile, gpus.arch, sglang_version)
    total = gpus.count * node.nnodes
    # The layout first: a fit at a layout SGLang refuses means nothing. tp_size_for gives
    # the profile's tp_size or all GPUs, or refuses.
    check_layout(resolved, resolved.tp_size or total, sglang_version, gpus.arch)
    check_fit(resolved, total, gpus.memory_gb)
    tp_size = tp_size_for(resolved, gpus.count, node.nnodes, gpus.memory_gb)
    if tp_size < total:
        # The server uses tp_size of the GPUs: they must hold the profile by themselves.
        try:
            check_fit(resolved, tp_size, gpus.memory_gb)
        except GpuFitError as error:
            message = f"{error} (tp_size {tp_size} uses {tp_size} of {total} GPUs)"
            raise GpuFitError(message) from None
    return Placement(resolved, tp_size, layout_of(resolved, tp_size), gpus, node, sglang_version)
