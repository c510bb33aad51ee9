"""MoE parallelism: which TP x EP x DP-attention layouts SGLang accepts, and what each
moves over the GPU links per generated token.

A layout is the tensor-parallel size (all GPUs of the server), the expert-parallel size, the
attention data-parallel size and the MoE all-to-all backend (profile fields ep_size,
dp_attention_size, moe_a2a_backend). data/parallelism.toml cites the checks of SGLang's real
server_args that ``layout_problems`` repeats before any change.

The estimate (``traffic``) counts, per decode step, the bytes each GPU sends for the
collectives of one forward pass, divided by the tokens the step generates, so that

    seconds per token = bytes per token / link bandwidth (nccl-tests bus bandwidth)

and its inverse is a ceiling in tokens/s that the links alone allow, all GPUs together.
Per layer, for n = tp GPUs, d attention DP groups (a = n / d GPUs each), hidden size h,
b bytes per activation element:

- attention: an all-reduce in each attention group, 2(a-1)/a x h x b per token of the group,
  i.e. 2(a-1)/a x h x b / d per token of the server (none at a = 1);
- a dense MLP, or an MoE without an all-to-all: d = 1, an all-reduce over the n GPUs,
  2(n-1)/n x h x b; d > 1, the DP gather (all-gather) and scatter (reduce-scatter) of SGLang's
  layers/dp_attention.py, (n-1)/n x h x b each: the same 2(n-1)/n x h x b. Expert
  parallelism without an all-to-all changes where experts run, not what moves;
- an MoE with an all-to-all: each token goes once to each other rank holding one of its k
  experts (dispatch) and comes back (combine): r = (n-1) x (1 - C(E - E/n, k) / C(E, k))
  expected remote ranks of E experts over n ranks, tokens spread over the n ranks, so
  2 x r x h x b / n per token of the server.

Assumptions, stated beside the numbers: bandwidth only (each collective's latency adds to
every step, however small the batch: ``collectives`` counts them), bf16 activations both
ways, experts picked uniformly, shared experts and the router without traffic of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import TYPE_CHECKING

from pyinfra_sglang import data
from pyinfra_sglang.arch import as_sm
from pyinfra_sglang.data_models import Parallelism
from pyinfra_sglang.serving.layout import (
    Layout,
    allowed_ep_sizes,
    divisors,
    layout_of,
    tp_layout_problems,
)
from pyinfra_sglang.versions import parse_version

if TYPE_CHECKING:
    from pyinfra_sglang.gpus import GpuSpec
    from pyinfra_sglang.serving.profiles import Profile


def _settings() -> Parallelism:
    return data.parallelism()


def a2a_backends(sglang_version: str) -> list[str]:
    """The --moe-a2a-backend choices of ``sglang_version`` for NVIDIA GPUs; [] before the
    oldest release read."""
    version = parse_version(sglang_version)
    settings = _settings().a2a
    lists = [c for c in settings.choices if parse_version(c.since) <= version]
    if not lists:
        return []
    newest = max(lists, key=lambda c: parse_version(c.since))
    return [b for b in newest.backends if b not in settings.not_nvidia]


def layout_problems(
    profile: Profile, tp_size: int, sglang_version: str, arch: str | None = None
) -> list[str]:
    """Everything refused in the profile's layout at ``tp_size`` with ``sglang_version`` on
    GPUs of ``arch`` (None: not checked per architecture)."""
    layout = layout_of(profile, tp_size)
    problems = tp_layout_problems(layout, profile)
    if layout.a2a:
        choices = a2a_backends(sglang_version)
        if layout.a2a not in choices:
            problems.append(
                f"moe_a2a_backend {layout.a2a} is not an NVIDIA all-to-all of SGLang "
                f"{sglang_version}; allowed: {', '.join(choices) or 'none'}"
            )
    sm = as_sm(arch) if arch else None
    for rule in _settings().ep_one_or_all:
        if (
            layout.ep not in (1, tp_size)
            and profile.quantization == rule.quantization
            and sm in rule.archs
        ):
            problems.append(
                f"ep_size {layout.ep}: SGLang's MoE runner for {rule.quantization} on "
                f"{sm} (flashinfer_cutlass) takes expert parallelism over all ranks or "
                f"none; allowed: 1 or {tp_size}"
            )
    return problems


# --- what each layout moves ----------------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """Bytes each GPU sends per generated token, by part of the model, for one layout."""

    layout: Layout
    attention_bytes: float
    ffn_bytes: float  # dense MLPs, and MoE layers without an all-to-all
    a2a_bytes: float  # MoE dispatch and combine
    collectives: int  # per decode step (each adds its latency, whatever the batch)
    remote_ranks: float  # expected other ranks a token goes to (all-to-all); 0 without

    @property
    def total_bytes(self) -> float:
        return self.attention_bytes + self.ffn_bytes + self.a2a_bytes

    def seconds_per_token(self, busbw_gbs: float) -> float:
        return self.total_bytes / (busbw_gbs * 1e9)

    def ceiling(self, busbw_gbs: float) -> float:
        """Tokens/s the links allow at ``busbw_gbs``, all GPUs together (inf: no traffic)."""
        seconds = self.seconds_per_token(busbw_gbs)
        return 1 / seconds if seconds else float("inf")


def expected_remote_ranks(experts: int, active: int, ranks: int) -> float:
    """Other ranks a token's ``active`` experts (of ``experts``, uniformly, none twice) sit
    on, ``experts / ranks`` per rank: (ranks - 1) x P(a given rank holds at least one)."""
    if ranks <= 1:
        return 0.0
    per_rank = experts // ranks
    p_none = comb(experts - per_rank, active) / comb(experts, active)
    return (ranks - 1) * (1 - p_none)


def shape_missing(profile: Profile) -> list[str]:
    """The shape fields the estimate needs that the profile leaves unset."""
    needed = ["hidden_size", "num_layers"]
    if profile.moe_a2a_backend not in (None, "none"):
        needed += ["num_routed_experts", "num_experts_per_token"]
    return [name for name in needed if getattr(profile, name) is None]


def traffic(profile: Profile, layout: Layout) -> Traffic:
    """What ``layout`` moves per generated token for the profile's model (shape_missing()
    must be empty)."""
    h, layers = profile.hidden_size, profile.num_layers
    assert h is not None and layers is not None, shape_missing(profile)
    moe_layers = layers if profile.num_moe_layers is None else profile.num_moe_layers
    hb = h * float(_settings().estimate.activation_bytes)
    n, d, a = layout.tp, layout.dp, layout.attn_tp
    all_reduce = 2 * (n - 1) / n * hb
    attention = layers * 2 * (a - 1) / a * hb / d
    collectives = layers if a > 1 else 0
    per_ffn = 1 if d == 1 else 2  # an all-reduce, or a gather and a scatter
    remote = 0.0
    if layout.a2a and n > 1:
        experts, active = profile.num_routed_experts, profile.num_experts_per_token
        assert experts is not None and active is not None
        remote = expected_remote_ranks(experts, active, n)
        a2a = moe_layers * 2 * remote * hb / n
        ffn = (layers - moe_layers) * all_reduce
        collectives += (layers - moe_layers) * per_ffn + moe_layers * 2
    else:
        a2a = 0.0
        ffn = layers * all_reduce
        collectives += layers * per_ffn if n > 1 else 0
    return Traffic(layout, attention, ffn, a2a, collectives, remote)


@dataclass(frozen=True)
class Link:
    """The bandwidth the estimate divides by, and where it comes from."""

    busbw_gbs: float
    source: str


def link_for(spec: GpuSpec | None, pcie_only: bool, gpu_count: int) -> Link | None:
    """The link figure for GPUs of ``spec``: the measured PCIe-only bus bandwidth, else the
    GPU table's NVLink figure; None for one GPU, or an unknown GPU with NVLink."""
    if gpu_count <= 1:
        return None
    settings = _settings().estimate
    if pcie_only or (spec is not None and not spec.nvlink):
        return Link(
            float(settings.pcie_only_busbw_gbs),
            "PCIe through the host, all-reduce bus bandwidth measured on 8x RTX 5090",
        )
    if spec is None or not spec.nvlink_bandwidth_gbs:
        return None
    share = float(settings.nvlink_share_of_table)
    return Link(
        spec.nvlink_bandwidth_gbs * share,
        f"NVLink, {spec.name}: {spec.nvlink_bandwidth_gbs:g} GB/s both ways, one direction",
    )


def candidate_layouts(profile: Profile, tp_size: int) -> list[Layout]:
    """The layouts worth comparing at ``tp_size``: TP; for an MoE model, DP attention at
    each size that divides it, and EP over all GPUs with an all-to-all, with and without DP
    attention over all GPUs."""
    layouts = [Layout(tp_size)]
    if profile.num_routed_experts is None or tp_size == 1:
        return layouts
    layouts += [Layout(tp_size, dp=d) for d in divisors(tp_size)[1:]]
    if tp_size in allowed_ep_sizes(profile, tp_size):
        layouts.append(Layout(tp_size, ep=tp_size, a2a="deepep"))
        layouts.append(Layout(tp_size, ep=tp_size, dp=tp_size, a2a="deepep"))
    return layouts


def fit_note(profile: Profile, layout: Layout, gpu_memory_gb: float | None) -> str:
    """ ", does not fit (X GiB per GPU)" where ``layout`` does not hold the profile on GPUs of
    ``gpu_memory_gb`` (memory_fit.py); "" where it does or memory is not known."""
    from pyinfra_sglang.serving import memory_fit

    if gpu_memory_gb is None:
        return ""
    as_laid_out = profile.model_copy(
        update={"ep_size": layout.ep, "dp_attention_size": layout.dp, "moe_a2a_backend": None}
    )
    need = memory_fit.per_gpu_need(as_laid_out, layout.tp, gpu_memory_gb)
    if need is None or need.fits:
        return ""
    return f", does not fit ({need.need:.1f} of {need.budget:.1f} GiB per GPU)"


def estimate_lines(
    profile: Profile, tp_size: int, link: Link | None, gpu_memory_gb: float | None = None
) -> list[str]:
    """The estimate as ``render`` prints it: the profile's layout, then the others (each
    marked where it would not fit GPUs of ``gpu_memory_gb``)."""
    missing = shape_missing(profile)
    chosen = layout_of(profile, tp_size)
    if tp_size == 1:  # whatever the profile's shape: a single GPU has no link to cross
        return ["interconnect estimate: one GPU, nothing crosses a link"]
    if missing:
        return [f"interconnect estimate: none (the profile leaves {', '.join(missing)} unset)"]
    head = f"interconnect estimate per generated token, {profile.name} over {tp_size} GPUs"
    if link is None:
        lines = [f"{head} (no link bandwidth known: bytes only):"]
    else:
        lines = [f"{head}, link {link.busbw_gbs:g} GB/s ({link.source}):"]
    layouts = [chosen] + [x for x in candidate_layouts(profile, tp_size) if x != chosen]
    for layout in layouts:
        t = traffic(profile, layout)
        mark = "*" if layout == chosen else " "
        line = (
            f" {mark} {layout.name():<47} {t.total_bytes / 1e6:6.2f} MB/token/GPU, "
            f"{t.collectives} collectives/step"
        )
        if link is not None:
            line += (
                f", {t.seconds_per_token(link.busbw_gbs) * 1e6:7.1f} us/token, "
                f"ceiling {t.ceiling(link.busbw_gbs):,.0f} tok/s"
            )
        lines.append(line + fit_note(profile, layout, gpu_memory_gb))
    lines.append(
        "  (* this profile's layout. Assumed: bandwidth only, each collective's latency comes "
        "on top of every step; bf16 activations; experts picked uniformly, a token sent once "
        "per rank; shared experts move nothing. A ceiling, not a forecast)"
    )
    return lines
