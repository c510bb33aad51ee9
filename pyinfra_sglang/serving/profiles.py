"""Model profiles: what to serve and how, as intents (data/profiles/<name>.toml).

A profile holds intents such as ``sparse_attention_prefill_backend = "trtllm"``, never flag
strings: ``render.server_args`` spells them for the pinned SGLang release. Profiles ship in
``pyinfra_sglang/data/profiles/``; users add or replace profiles with TOML files in folders
of their own (e.g. ``profiles/`` beside the inventory), searched before the built-in one.
"""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang.arch import Arch, SmArch, as_sm
from pyinfra_sglang.serving.extra_args import extra_args_problems
from pyinfra_sglang.serving.layout import profile_layout_problems
from pyinfra_sglang.versions import parse_version

NAME_PATTERN = r"^[a-z0-9][a-z0-9.-]*$"
SUFFIX = ".toml"
# A profile file larger than this is not a profile (a mistaken path, a binary file).
MAX_PROFILE_BYTES = 256 * 1024

# Control characters (C0, DEL, C1): none may go into a unit, env or YAML file. systemd refuses
# a unit with a NUL or a carriage return in it, and a newline would start a new setting.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# The longest timeout a profile may set (24 h): StartLimitIntervalSec and TimeoutStopSec are
# rendered from them, and systemd ignores a setting it cannot parse (a span past its 64-bit
# microsecond counter) with a warning only: the crash-loop guard or the drain would be gone.
# No start, drain or watchdog step of a server needs longer.
MAX_TIMEOUT_S = 86400

Backend = Annotated[str, Field(pattern=r"^[a-z0-9_]+$")]
# A KV cache dtype as a key of kv_bytes_per_token ("auto": the profile leaves it unset).
KvDtype = Annotated[str, Field(pattern=r"^[a-z0-9_]+$")]


def _release_text(value: Any) -> Any:
    """A release number as text (TOML may give 0.5 as a float): checked, else ValueError."""
    if value is None:
        return value
    parse_version(str(value))
    return str(value)


Release = Annotated[str, BeforeValidator(_release_text)]
# An environment variable's name as systemd's EnvironmentFile and every shell take it.
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class ProfileError(PyinfraError):
    """A profile that cannot be found, read or validated."""


def control_characters_in(text: str) -> list[str]:
    """The control characters in ``text``, as repr() shows them (empty: none)."""
    return sorted({repr(found)[1:-1] for found in CONTROL_CHARACTERS.findall(text)})


class ArchSettings(BaseModel):
    """What a profile needs on one GPU architecture, over its top-level values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attention_backend: Backend | None = None
    sparse_attention_prefill_backend: Backend | None = None
    sparse_attention_decode_backend: Backend | None = None
    kv_cache_dtype: str | None = None
    mem_fraction_static: float | None = Field(None, gt=0, lt=1)
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    min_sglang_version: Release | None = Field(
        None, description="Oldest SGLang release that runs the profile on this architecture."
    )
    env: dict[EnvName, str] = Field(default_factory=dict)


# Fields a per-architecture table ([arch.sm_120]) may set: what the kernels of one GPU
# architecture need. Its env is merged over the profile's; its min_sglang_version raises the
# profile's.
ARCH_FIELDS = tuple(ArchSettings.model_fields)


class Profile(BaseModel):
    """One model profile. ``name`` and ``source`` come from the file, not from its keys."""

    # No inf or NaN (min_total_gpu_memory_gb = inf overflowed the fit check); booleans are
    # true or false, never "yes" (StrictBool).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    source: str = Field(description="File the profile was read from.")
    description: str = Field("", description="What the profile serves, one line of free text.")

    model: str = Field(min_length=1, description="Hugging Face repository id or local path.")
    revision: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None = Field(
        None,
        description=(
            "Commit of the Hub model to download and serve (40 hex digits); the inventory's "
            "sglang_model_revision wins, and overriding model drops it. Unset: main, resolved "
            "and reported at each run."
        ),
    )
    served_model_name: str | None = Field(None, description="Model name the API reports.")
    quantization: str | None = Field(None, description="Quantization method, e.g. modelopt_fp4.")
    trust_remote_code: StrictBool = Field(
        False,
        description=(
            "Let SGLang run the model repository's own Python code (--trust-remote-code): only "
            "for a checkpoint whose code you have read."
        ),
    )
    archs: list[SmArch] | None = Field(
        None,
        description=(
            "GPU architectures the profile runs on (sm_120; 120 and 12.0 read the same); "
            "unset: any."
        ),
    )
    tp_size: int | None = Field(None, ge=1, description="Tensor-parallel size; unset: all GPUs.")
    num_attention_heads: int | None = Field(
        None,
        ge=1,
        description=(
            "The model's attention heads (num_attention_heads in its config.json): the "
            "tensor-parallel size must divide them. Unset: not checked. Override it with "
            "model when serving a model of another architecture."
        ),
    )
    num_key_value_heads: int | None = Field(
        None,
        ge=1,
        description=(
            "The model's KV heads (num_key_value_heads in its config.json; grouped-query "
            "attention): the tensor-parallel size must divide them, or be a multiple of them "
            "(SGLang then replicates each). Unset: not checked (MLA models need no check)."
        ),
    )

    attention_backend: Backend | None = Field(
        None,
        description=(
            "SGLang's attention backend (--attention-backend: fa3, flashinfer, triton, "
            "trtllm_mha...). Unset: SGLang's default for the GPU and model (flash-attn by need "
            "reads it)."
        ),
    )
    sparse_attention_prefill_backend: Backend | None = Field(
        None,
        description=(
            "A DSA model's (GLM-5) sparse-attention prefill backend, spelt for the pinned "
            "release; only backends whose kernels run on the GPU (data/attention_backends.toml)."
        ),
    )
    sparse_attention_decode_backend: Backend | None = Field(
        None, description="The same for decode."
    )
    kv_cache_dtype: str | None = Field(
        None,
        description=(
            "The KV cache's dtype (--kv-cache-dtype, e.g. fp8_e4m3). Unset: auto, the model's "
            "dtype. It picks the kv_bytes_per_token entry the fit uses."
        ),
    )

    mem_fraction_static: float | None = Field(
        None,
        gt=0,
        lt=1,
        description=(
            "Share of each GPU's memory SGLang gives weights and KV cache "
            "(--mem-fraction-static). Unset: SGLang's own, planned at 0.85."
        ),
    )
    cuda_graph: StrictBool = Field(True, description="Capture CUDA graphs for decode.")
    cuda_graph_max_bs: int | None = Field(
        None, ge=1, description="Largest batch captured in CUDA graphs (--cuda-graph-max-bs)."
    )
    chunked_prefill_size: int | None = Field(None, description="Tokens per prefill chunk; -1: off.")
    # The scheduler's order of waiting requests and its cap on running ones (both searched by
    # deploy/tune.py). Of server_args' choices (0.5.9 .. 0.5.23) these need no request metadata
    # (priority and routing-key do; random and dfs-weight are not for serving).
    schedule_policy: Literal["lpm", "fcfs", "lof"] | None = Field(
        None,
        description="The order of waiting requests (--schedule-policy). Unset: SGLang's.",
    )
    max_running_requests: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="Most requests running at once (--max-running-requests). Unset: SGLang's.",
    )

    reasoning_parser: str | None = Field(
        None,
        description=(
            "How SGLang splits a reasoning model's thinking from its answer "
            "(--reasoning-parser: qwen3, deepseek-r1, gpt-oss, glm45...). Unset: not split. "
            "`profile new` writes the family's (data/model_families.toml)."
        ),
    )
    tool_call_parser: str | None = Field(
        None,
        description=(
            "How SGLang reads tool calls in the output (--tool-call-parser: qwen, llama3, "
            "deepseekv3, gpt-oss, glm47...). Unset: none parsed."
        ),
    )
    disable_shared_experts_fusion: StrictBool = Field(
        False,
        description=(
            "Keep an MoE's shared experts apart from the routed ones "
            "(--disable-shared-experts-fusion; NVFP4 GLM-5 checkpoints need it)."
        ),
    )

    watchdog_timeout_s: float | None = Field(
        None,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="SGLang's watchdog (--watchdog-timeout), seconds: at most 86400 (24 h).",
    )
    start_timeout_s: int = Field(
        900,
        gt=0,
        le=MAX_TIMEOUT_S,
        description=(
            "Longest wait from start to healthy, seconds; the unit's crash-loop guard "
            "(StartLimitIntervalSec) spans a few such starts. At most 86400 (24 h): systemd "
            "ignores a span it cannot parse, and the guard with it."
        ),
    )
    drain_timeout_s: int = Field(
        120,
        gt=0,
        le=MAX_TIMEOUT_S,
        description=(
            "Longest a stop waits for the HTTP server to finish the requests in flight "
            "(TimeoutStopSec) before everything left is killed, seconds. At most 86400 (24 h): "
            "systemd ignores a span it cannot parse, and the stop would wait its default."
        ),
    )
    # The model's size, from which the GPU-memory floor follows per GPU (memory_fit.py).
    weights_gb: float | None = Field(
        None,
        ge=0.001,  # 1 MB: a smaller size is a typo (1e-320 passed as "more than 0")
        description=(
            "The checkpoint's weight tensors, decimal GB as the Hub lists them (every layer, "
            "the MTP layer included): spread over the tensor-parallel ranks. Unset: "
            "min_total_gpu_memory_gb is the floor instead."
        ),
    )
    num_layers: int | None = Field(
        None, ge=1, description="The model's layers (num_hidden_layers in its config.json)."
    )
    mtp_layers: int = Field(
        0,
        ge=0,
        description=(
            "Next-token (MTP) layers in the checkpoint (num_nextn_predict_layers): what mtp "
            "needs; 0: none, and mtp is refused."
        ),
    )
    kv_bytes_per_token: dict[KvDtype, PositiveInt] = Field(
        default_factory=dict,
        description=(
            "KV cache bytes per token over all layers, per kv_cache_dtype (auto: unset), as "
            "one rank holds them before a tensor-parallel split."
        ),
    )
    kv_bytes_per_token_by_backend: dict[Backend, dict[KvDtype, PositiveInt]] = Field(
        default_factory=dict,
        description=(
            "kv_bytes_per_token where a sparse-attention backend lays the KV cache out its own "
            "way, per backend and kv_cache_dtype: used over kv_bytes_per_token when the "
            "prefill or the decode backend is one of them (SGLang sizes a DSA cache for "
            "trtllm when either backend is trtllm)."
        ),
    )
    kv_split_over_tp: StrictBool = Field(
        True,
        description=(
            "The KV cache is split over tensor-parallel ranks (by KV heads); false for MLA, "
            "whose one latent head every rank holds whole."
        ),
    )
    context_length: int | None = Field(
        None,
        ge=1,
        description=(
            "The model's longest context in tokens (config.json, as SGLang reads it): the fit "
            "report's requests of a full context. Not a flag: SGLang reads it from the model."
        ),
    )
    min_kv_tokens: int | None = Field(
        None, ge=1, description="Tokens the KV cache must hold at least (the fit check's floor)."
    )
    gpu_overhead_gb: float = Field(
        0,
        ge=0,
        description=(
            "Per GPU, GiB, inside mem_fraction_static beyond weights and KV cache (buffers, "
            "pools): counted by the fit check."
        ),
    )
    min_total_gpu_memory_gb: float | None = Field(
        None,
        ge=0.001,  # 1 MB: a smaller size is a typo (1e-320 passed as "more than 0")
        description=(
            "A plain floor, GPU memory over all GPUs, for a profile that does not state its "
            "model's size (weights_gb); not both."
        ),
    )
    # MTP: speculative decoding with the model's own next-token layer as the draft.
    mtp: StrictBool = Field(
        False,
        description=(
            "Speculative decoding with the model's next-token (MTP) layer; needs mtp_layers. "
            "Off by default."
        ),
    )
    mtp_num_steps: int = Field(
        3,
        ge=1,
        le=16,
        description=(
            "Draft steps per verify (--speculative-num-steps; topk 1, steps + 1 draft tokens). "
            "3 is SGLang's own choice for DeepSeek- and GLM-MoE models."
        ),
    )
    # MoE parallelism (data/parallelism.toml says what SGLang checks; parallelism.py).
    ep_size: int | None = Field(
        None,
        ge=1,
        description=(
            "Expert-parallel ranks (--ep-size): each holds num_routed_experts / ep_size "
            "experts. Must divide the tensor-parallel size and num_routed_experts. Unset: 1."
        ),
    )
    dp_attention_size: int | None = Field(
        None,
        ge=1,
        description=(
            "Attention data-parallel groups (--dp-size with --enable-dp-attention, "
            "--attn-dp-size from 0.5.22): attention runs on tp_size / this many GPUs per "
            "group, the MoE over all. Must divide the tensor-parallel size. Unset: 1 (off)."
        ),
    )
    moe_a2a_backend: Backend | None = Field(
        None,
        description=(
            "The MoE all-to-all (--moe-a2a-backend, e.g. deepep), where the pinned release "
            "has it; needs ep_size equal to the tensor-parallel size. Unset: SGLang's none."
        ),
    )
    # The model's shape, for the MoE layouts' checks and their communication estimate.
    hidden_size: int | None = Field(
        None, ge=1, description="The model's hidden size (hidden_size in its config.json)."
    )
    num_moe_layers: int | None = Field(
        None,
        ge=0,
        description=(
            "Layers with routed experts (num_hidden_layers less first_k_dense_replace); "
            "unset: all num_layers."
        ),
    )
    num_routed_experts: int | None = Field(
        None, ge=1, description="Routed experts per MoE layer (n_routed_experts): MoE models."
    )
    num_experts_per_token: int | None = Field(
        None, ge=1, description="Routed experts each token goes to (num_experts_per_tok)."
    )
    mlp_weights_gb: float | None = Field(
        None,
        ge=0.001,  # 1 MB: a smaller size is a typo (1e-320 passed as "more than 0")
        description=(
            "The MLP part of weights_gb (routed and shared experts, dense MLPs), decimal GB: "
            "split over all tensor-parallel ranks in every layout, while the rest (attention, "
            "embeddings) is split within each attention data-parallel group only."
        ),
    )
    # Decode roofline inputs (serving/roofline.py): weights read per generated token.
    active_params_b: float | None = Field(
        None, gt=0, description="Parameters read per token, billions (MoE: the active ones)."
    )
    bytes_per_param: float | None = Field(
        None, gt=0, description="Bytes per weight as stored, scales included (bf16: 2)."
    )
    min_sglang_version: Release | None = Field(
        None, description="Oldest SGLang release that works."
    )
    enable_metrics: StrictBool = Field(
        True,
        description=(
            "Serve Prometheus metrics on /metrics (--enable-metrics): what the benchmark, the "
            "watchdog and monitoring read."
        ),
    )
    extra_args: list[str] = Field(
        default_factory=list, description="Server arguments passed as given, after the rest."
    )
    env: dict[EnvName, str] = Field(
        default_factory=dict, description="Environment variables of the server process."
    )
    arch: dict[SmArch, ArchSettings] = Field(
        default_factory=dict,
        description="Per GPU architecture ([arch.sm_120]): values that replace the top-level ones.",
    )
    fallback_profile: str | None = Field(
        None,
        pattern=NAME_PATTERN,
        description="The profile to run where this one cannot (named in refusals).",
    )

    @field_validator("chunked_prefill_size")
    @classmethod
    def _chunk_or_off(cls, value: int | None) -> int | None:
        if value is not None and value != -1 and value < 1:
            raise ValueError("must be a positive number of tokens, or -1 to turn chunking off")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_managed_flags(cls, value: list[str]) -> list[str]:
        problems = extra_args_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _no_control_characters(cls, value: Any, info: ValidationInfo) -> Any:
        # Every field but the free-text description may end up in the unit file (ExecStart,
        # Description) or the config file.
        if info.field_name in ("description", "source"):
            return value
        if isinstance(value, dict) and info.field_name == "env":
            value_texts = [*value, *value.values()]
        else:
            value_texts = value if isinstance(value, list) else []
        texts = [value] if isinstance(value, str) else value_texts
        found = [c for text in texts if isinstance(text, str) for c in control_characters_in(text)]
        if found:
            raise ValueError(
                f"control characters ({', '.join(sorted(set(found)))}) cannot go into a unit or "
                "config file"
            )
        return value

    @model_validator(mode="after")
    def _revision_of_a_hub_model(self) -> Profile:
        from pyinfra_sglang.model_files.model_snapshot import is_local_model

        if self.revision and is_local_model(self.model):
            raise ValueError(
                f"revision is set but model {self.model} is a local path (served as it is there)"
            )
        return self

    @model_validator(mode="after")
    def _one_memory_floor(self) -> Profile:
        if self.weights_gb is None and self.min_total_gpu_memory_gb is None:
            raise ValueError(
                "set weights_gb (the model's weights, GB; the GPU-memory floor follows from "
                "it) or min_total_gpu_memory_gb (a plain floor over all GPUs)"
            )
        if self.weights_gb is not None and self.min_total_gpu_memory_gb is not None:
            raise ValueError(
                f"weights_gb ({self.weights_gb:g}) and min_total_gpu_memory_gb "
                f"({self.min_total_gpu_memory_gb:g}) are both set: the floor follows from "
                "weights_gb; unset one of them (in overrides: null)"
            )
        if self.min_kv_tokens and not self.kv_bytes_per_token:
            raise ValueError("min_kv_tokens is set but kv_bytes_per_token is not: set both")
        if self.kv_bytes_per_token_by_backend and not self.kv_bytes_per_token:
            raise ValueError(
                "kv_bytes_per_token_by_backend is set but kv_bytes_per_token is not: set the "
                "bytes of the other backends too"
            )
        return self

    @model_validator(mode="after")
    def _mtp_needs_an_mtp_layer(self) -> Profile:
        if self.mtp and not self.mtp_layers:
            raise ValueError(
                f"mtp is true but model {self.model} has no MTP (next-token) layer "
                "(mtp_layers = 0): speculative decoding with MTP needs one; allowed: mtp = "
                "false, or a model whose config.json has num_nextn_predict_layers >= 1 "
                "(set mtp_layers to it)"
            )
        if self.mtp_layers and self.weights_gb is not None and self.num_layers is None:
            raise ValueError(
                "mtp_layers is set but num_layers is not: the MTP layer's share of weights_gb "
                "is counted by layers"
            )
        return self

    @model_validator(mode="after")
    def _tp_size_splits_the_heads(self) -> Profile:
        if self.tp_size is not None and not tp_size_allowed(self, self.tp_size):
            raise ValueError(
                f"tp_size {self.tp_size} does not split {heads_text(self)} evenly over its "
                f"ranks; allowed sizes: {', '.join(map(str, allowed_tp_sizes(self)))}"
            )
        return self

    @model_validator(mode="after")
    def _moe_layout(self) -> Profile:
        problems = profile_layout_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _graph_size_needs_graphs(self) -> Profile:
        sizes = [self.cuda_graph_max_bs] + [a.cuda_graph_max_bs for a in self.arch.values()]
        if any(size is not None for size in sizes) and not self.cuda_graph:
            raise ValueError(
                "cuda_graph_max_bs is set but cuda_graph is false: with graphs off it means "
                "nothing; clear it too (in overrides: "
                '{"cuda_graph": false, "cuda_graph_max_bs": null})'
            )
        return self

    @model_validator(mode="after")
    def _arch_tables_in_archs(self) -> Profile:
        if self.archs is not None:
            stray = sorted(set(self.arch) - set(self.archs))
            if stray:
                raise ValueError(
                    f"arch tables for {', '.join(stray)}, which are not in archs "
                    f"({', '.join(self.archs)})"
                )
        return self

    def for_arch(self, arch: Arch | str | None) -> Profile:
        """The profile as it runs on ``arch`` (any spelling): its [arch.<arch>] values in
        place of the top-level ones, env merged, the later of the two min_sglang_version.
        Unchanged when ``arch`` is None or has no table."""
        settings = self.arch.get(as_sm(arch)) if arch else None
        if settings is None:
            return self
        values = self.model_dump(exclude={"name", "source", "arch"}, exclude_unset=True)
        for key in settings.model_fields_set - {"env", "min_sglang_version"}:
            values[key] = getattr(settings, key)
        values["env"] = {**self.env, **settings.env}
        versions = [v for v in (self.min_sglang_version, settings.min_sglang_version) if v]
        if versions:
            values["min_sglang_version"] = max(versions, key=parse_version)
        return Profile(name=self.name, source=self.source, **values)


PROFILE_FIELDS = frozenset(Profile.model_fields) - {"name", "source"}


def tp_size_allowed(profile: Profile, tp_size: int) -> bool:
    """Can the model's heads be split over ``tp_size`` ranks? Attention heads: ``tp_size``
    divides them; KV heads: divides them, or is a multiple of them (each is replicated), as
    SGLang's attention layers assert. True where the profile leaves the heads unset."""
    heads, kv = profile.num_attention_heads, profile.num_key_value_heads
    if tp_size < 1:
        return False
    if heads is not None and heads % tp_size:
        return False
    return kv is None or not (kv % tp_size if kv >= tp_size else tp_size % kv)


def allowed_tp_sizes(profile: Profile, up_to: int | None = None) -> list[int]:
    """The tensor-parallel sizes the model's heads allow, up to ``up_to`` (unset: up to the
    attention heads, or the KV heads, whichever is known); [] when the profile leaves the
    heads unset and ``up_to`` is None."""
    limit = up_to or profile.num_attention_heads or profile.num_key_value_heads or 0
    return [size for size in range(1, limit + 1) if tp_size_allowed(profile, size)]


def heads_text(profile: Profile) -> str:
    """The model's heads as refusals name them: "the model's 64 attention heads"."""
    parts = []
    if profile.num_attention_heads is not None:
        parts.append(f"{profile.num_attention_heads} attention heads")
    if profile.num_key_value_heads is not None:
        parts.append(f"{profile.num_key_value_heads} KV heads")
    return "the model's " + " and ".join(parts) if parts else "the model's heads"


def builtin_profile_dir() -> Traversable:
    return files("pyinfra_sglang").joinpath("data", "profiles")


def _search_path(extra_dirs: Iterable[str | Path]) -> list[Traversable]:
    # The user's folders first, in the order given: their profiles win over built-in ones.
    return [Path(d) for d in extra_dirs] + [builtin_profile_dir()]


def available_profiles(extra_dirs: Iterable[str | Path] = ()) -> dict[str, str]:
    """Profile name -> file it is read from, for every profile on the search path."""
    found: dict[str, str] = {}
    for folder in _search_path(extra_dirs):
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.name.endswith(SUFFIX) and entry.is_file():
                found.setdefault(entry.name.removesuffix(SUFFIX), str(entry))
    return dict(sorted(found.items()))


def load_profile(name: str, extra_dirs: Iterable[str | Path] = ()) -> Profile:
    """The profile ``name`` from the first folder that has it: ``extra_dirs``, then built-in.
    A name is a file name without ``.toml``: never a path that leaves those folders."""
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        raise ProfileError(
            f"not a profile name: {name!r}; a profile name is lowercase letters, digits, '.' "
            "and '-', starting with a letter or digit (a file <name>.toml in a profile folder)"
        )
    search = _search_path(extra_dirs)
    for folder in search:
        candidate = folder.joinpath(name + SUFFIX)
        try:
            found = candidate.is_file()
        except OSError as error:  # a name or folder the filesystem cannot hold (too long)
            raise ProfileError(
                f"cannot look for profile {name!r} in {folder}: {error.strerror}"
            ) from None
        if found:
            return profile_from_text(name, str(candidate), _read_profile_text(candidate))
    try:
        known = available_profiles(extra_dirs)
    except OSError as error:
        raise ProfileError(f"cannot list the profile folders: {error.strerror}") from None
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ProfileError(
        f"no profile {name!r}{hint}; known: {', '.join(known) or 'none'}; "
        f"searched {', '.join(str(folder) for folder in search)}"
    )


def load_profile_file(path: str | Path) -> Profile:
    """A profile read from one file; its name is the file name without ``.toml``."""
    path = Path(path)
    return profile_from_text(path.name.removesuffix(SUFFIX), str(path), _read_profile_text(path))


def _read_profile_text(path: Traversable | Path) -> str:
    """A profile file's text: UTF-8, at most MAX_PROFILE_BYTES; ProfileError otherwise."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_PROFILE_BYTES + 1)
    except OSError as error:
        raise ProfileError(f"cannot read profile file {path}: {error.strerror}") from None
    if len(data) > MAX_PROFILE_BYTES:
        raise ProfileError(
            f"profile file {path} is larger than {MAX_PROFILE_BYTES // 1024} KiB: not a profile"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ProfileError(
            f"profile file {path} is not UTF-8 text (byte {error.start}): not a TOML profile"
        ) from None


# A real profile nests tables 3 deep and dots keys 2 deep; tomllib recurses per bracket
# (60,000 '[' end in RecursionError) and dotted keys cost memory quadratically (a 240 KB file
# reached 8 GB). Checked on the text, before tomllib sees it.
MAX_TOML_NESTING = 16
MAX_KEY_DOTS = 16
_KEY_PART = re.compile(r"^\s*\[*([^=\]]*)")


def _toml_shape_problem(text: str) -> str | None:
    """Why the text is refused before parsing: brackets or braces nested past
    MAX_TOML_NESTING, or a key with more than MAX_KEY_DOTS dots."""
    depth = deepest = 0
    for char in re.sub(r'"(?:\\.|[^"\\\n])*"|\'[^\'\n]*\'', "", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    if deepest > MAX_TOML_NESTING:
        return f"arrays or tables nested {deepest} deep (at most {MAX_TOML_NESTING})"
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if stripped.startswith("#") or not ("=" in line or stripped.startswith("[")):
            continue  # a comment, or a value continued from the line before
        match = _KEY_PART.match(line)
        if match and match.group(1).count(".") > MAX_KEY_DOTS:
            return f"line {number}: a key of more than {MAX_KEY_DOTS} dotted parts"
    return None


# A deploy reads each host's profile several times a host (planning, each role's render):
# parsed and validated once per text, a frozen Profile shared (a failure is not kept).
@functools.lru_cache(maxsize=64)
def profile_from_text(name: str, source: str, text: str) -> Profile:
    problem = _toml_shape_problem(text)
    if problem:
        raise ProfileError(f"profile {name} ({source}): not a profile: {problem}")
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ProfileError(f"profile {name} ({source}): not valid TOML: {error}") from error
    except (RecursionError, MemoryError) as error:
        raise ProfileError(
            f"profile {name} ({source}): not a profile: {type(error).__name__} parsing it"
        ) from None
    for key in ("name", "source"):
        if key in values:
            raise ProfileError(
                f"profile {name} ({source}): key {key!r} is not allowed: a profile's {key} "
                "is its file's"
            )
    return _validated(name, source, values, context="")


def merge_overrides(profile: Profile, overrides: Mapping[str, Any]) -> Profile:
    """``profile`` with ``overrides`` (e.g. from the inventory) in place of its values; None
    unsets a value. Unknown keys and bad values raise ProfileError naming them."""
    if not overrides:
        return profile
    values = profile.model_dump(exclude={"name", "source"}, exclude_unset=True)
    if "arch" not in overrides:
        # An overridden value wins on every architecture: drop it from the arch tables.
        tables = values.get("arch", {})
        for table in tables.values():
            for key in set(overrides) & set(ARCH_FIELDS):
                table.pop(key, None)
    if "model" in overrides and "revision" not in overrides:
        # The profile's pinned commit is one of its own model's: another model has its own.
        values.pop("revision", None)
    values.update(overrides)
    return _validated(profile.name, profile.source, values, context=" with overrides")


def _validated(name: str, source: str, values: dict[str, Any], context: str) -> Profile:
    try:
        return Profile(name=name, source=source, **values)
    except ValidationError as error:
        problems = [_describe(item, values) for item in error.errors()]
        lines = [f"invalid profile {name} ({source}){context}:"] + [f"  - {p}" for p in problems]
        raise ProfileError("\n".join(lines)) from None


def _describe(item: Mapping[str, Any], values: Mapping[str, Any]) -> str:
    loc = [str(part) for part in item["loc"]]
    if not loc:
        return str(item["msg"]).removeprefix("Value error, ")
    field = loc[0]
    where = field + "".join(f"[{part}]" for part in loc[1:])
    if item["type"] == "extra_forbidden":
        close = difflib.get_close_matches(field, sorted(PROFILE_FIELDS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"{where}: unknown key{hint}"
    message = str(item["msg"]).removeprefix("Value error, ")
    if field in values:
        return f"{where} = {values[field]!r}: {message}"
    return f"{where}: {message}"
