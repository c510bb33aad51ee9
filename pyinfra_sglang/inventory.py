"""The inventory model: every value pyinfra-sglang reads from host and group data.

One pydantic class, ``HostConfig``, holds the fields with their defaults. ``validate_inventory``
checks every host of a pyinfra inventory against it before any host is changed and reports
one problem per bad value, naming the host, the field, the value, where the value came from
and what is allowed. Keys that belong to pyinfra itself (connector data such as ``ssh_user``,
global arguments such as ``_sudo``) pass through; keys starting with ``x_`` are the user's own
and are not checked; any other key is an error, so a typo cannot pass silently.

Beyond the values themselves, validation renders every host's service files with the GPUs the
inventory plans for (secrets read, then masked) and refuses what the renderer would refuse, so
a value that cannot work stops the run before the driver, CUDA or the virtualenv change. It
also refuses SSH settings that trust unknown host keys, and warns about weaker ones.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from weakref import WeakKeyDictionary

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    HttpUrl,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data
from pyinfra_sglang.arch import FlashAttnArch
from pyinfra_sglang.gpus import UnknownGpuError, gpu_by_name, gpu_names
from pyinfra_sglang.multinode_firewall import filtered_ports, port_in_filtered_ranges
from pyinfra_sglang.p2p import check_p2p_env
from pyinfra_sglang.tuning.space import load_space

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.inventory import Inventory

USER_KEY_PREFIX = "x_"


def _int_from_digits(value: Any) -> Any:
    # "590" from a Python inventory means the branch 590.
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


def _version_text(value: Any, info: ValidationInfo) -> Any:
    # pyinfra's --data turns "3.10" into the float 3.1 and "13.10" into 13.1: a version read
    # as a number has lost its trailing zeros, so a number is refused, never guessed at.
    field = info.field_name
    if isinstance(value, bool):
        raise ValueError("a version is text, not true/false")
    if isinstance(value, float):
        example = HostConfig.model_fields[field].default if field else "3.12"
        raise ValueError(
            f"a version must be text, not the number {value!r} (a number loses trailing "
            f"zeros: 3.10 reads as 3.1); quote the value: --data '{field}=\"{example}\"' on "
            f'the command line, {field} = "{example}" in an inventory file'
        )
    return str(value) if isinstance(value, int) else value


def _no_bool(value: Any) -> Any:
    # true/false would pass as 1/0 (--data sglang_port=true is port 1): refuse them.
    if isinstance(value, bool):
        raise ValueError("a number is expected, not true/false")
    return value


def _none_if_empty(value: Any) -> Any:
    # An empty path (`--data hf_token_file=`) means "unset", not the current directory.
    return None if isinstance(value, str) and not value.strip() else value


OptionalPath = Annotated[Path | None, BeforeValidator(_none_if_empty)]
Port = Annotated[int, BeforeValidator(_no_bool), Field(ge=1, le=65535)]
VersionText = BeforeValidator(_version_text)

# Paths on the host that go into units and env files as they are: no quoting needed anywhere.
SAFE_HOST_PATH = r"^/[A-Za-z0-9._/-]+$"
RELEASE_PATTERN = r"^\d+\.\d+\.\d+(\.post\d+)?$"
# NVIDIA driver releases: 590.48.01, 570.26 (three-digit branch, then one or two numbers).
DRIVER_VERSION_PATTERN = r"^\d{3}\.\d+(\.\d+)?$"
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")

_nvidia = data.load("nvidia")
_python = data.load("python")
DriverBranch = Annotated[
    Literal[tuple(_nvidia["driver_branches"])],  # type: ignore[valid-type]
    BeforeValidator(_int_from_digits),
]
CudaVersion = Annotated[
    Literal[tuple(_nvidia["cuda_versions"])],  # type: ignore[valid-type]
    VersionText,
]


# Folders the sandboxed service cannot see (ProtectHome=yes in templates/sglang.service.j2).
HIDDEN_FROM_THE_SERVICE = ("/home", "/root", "/run/user")


def _visible_to_the_service(path: str) -> str:
    hidden = [p for p in HIDDEN_FROM_THE_SERVICE if path == p or path.startswith(p + "/")]
    if hidden:
        raise ValueError(f"{path} is under {hidden[0]}, which the sandboxed service cannot see")
    return path


def _known_gpu_model(value: str | None) -> str | None:
    # The table's own name, so it compares with what nvidia-smi prints.
    if value is None:
        return None
    try:
        return gpu_by_name(value).name
    except UnknownGpuError as error:
        raise ValueError(str(error)) from None


def _allowed(text: str) -> dict[str, str]:
    return {"allowed": text}


def _one_of(values) -> str:
    return ", ".join(str(v) for v in values)


def _field_error(field: str, message: str) -> PydanticCustomError:
    """A model-level error reported on ``field`` (see _validation_problem)."""
    return PydanticCustomError("host_config", "{message}", {"field": field, "message": message})


def _control_characters(value: Any) -> bool:
    if isinstance(value, str):
        return bool(CONTROL_CHARACTERS.search(value))
    if isinstance(value, (list, tuple)):
        return any(_control_characters(item) for item in value)
    if isinstance(value, dict):
        return any(_control_characters(k) or _control_characters(v) for k, v in value.items())
    return False


def versioned_venv_path(sglang_version: str, python_version: str, cuda_version: str) -> str:
    """The virtualenv of one SGLang / Python / CUDA combination (data/python.toml [venv])."""
    venv = _python["venv"]
    name = venv["name"].format(sglang=sglang_version, python=python_version, cuda=cuda_version)
    return f"{venv['root'].rstrip('/')}/{name}"


class HostConfig(BaseModel):
    """What pyinfra-sglang needs to know about one host; every field has a working default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nvidia_driver_branch: DriverBranch = Field(  # type: ignore[valid-type]
        _nvidia["default_driver_branch"],
        description="NVIDIA driver branch, locked with `nvidia-driver-pinning-<branch>`.",
        json_schema_extra=_allowed(_one_of(_nvidia["driver_branches"])),
    )
    nvidia_driver_version: (
        Annotated[str, VersionText, Field(pattern=DRIVER_VERSION_PATTERN)] | None
    ) = Field(
        None,
        description=(
            "Exact NVIDIA driver release on `nvidia_driver_branch` (e.g. 590.48.01), locked "
            "with NVIDIA's `nvidia-driver-pinning-<version>` instead of the branch's pin. "
            "Unset: the newest release of the branch."
        ),
        json_schema_extra=_allowed("a release of nvidia_driver_branch such as 590.48.01, or unset"),
    )
    nvidia_driver_update_within_branch: bool = Field(
        False,
        description=(
            "Move the driver to the newest release of its branch that apt offers (security "
            "fixes arrive this way; unattended-upgrades is kept off NVIDIA's packages), with "
            "the reboot handling of any driver change. Off: the audit warns when one is "
            "offered."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    nvidia_mok_key_file: OptionalPath = Field(
        None,
        description=(
            "File on the controller holding the private key (PEM) of a Machine Owner Key "
            "enrolled on hosts with Secure Boot on: DKMS signs the NVIDIA module with it "
            "(written 0600 where DKMS signs from). A host with Secure Boot on is refused "
            "without it."
        ),
        json_schema_extra=_allowed("a path on the controller, or unset"),
    )
    nvidia_mok_cert_file: OptionalPath = Field(
        None,
        description=(
            "File on the controller holding that key's certificate (DER), the one enrolled "
            "with `mokutil --import`; the deploy checks it is enrolled (`mokutil --test-key`)."
        ),
        json_schema_extra=_allowed("a path on the controller, or unset"),
    )
    nvidia_kernel_modules: Literal["open", "proprietary"] = Field(
        "open",
        description="Kernel module flavor; Blackwell GPUs need the open modules.",
        json_schema_extra=_allowed("open, proprietary"),
    )
    nvidia_driver_install: Literal["compute", "full"] = Field(
        "compute",
        description=(
            "`compute`: headless driver (CUDA libraries, kernel modules, nvidia-smi); "
            "`full`: NVIDIA's full driver metapackage."
        ),
        json_schema_extra=_allowed("compute, full"),
    )
    nvidia_apt_mirror: HttpUrl | None = Field(
        None,
        description=(
            "Base URL that replaces https://developer.download.nvidia.com/compute/cuda/repos "
            "(for air-gapped sites)."
        ),
        json_schema_extra=_allowed("an http(s) URL, or unset for NVIDIA's repository"),
    )
    nvidia_keyring_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = Field(
        None,
        description=(
            "sha256 of the cuda-keyring .deb the repository (or `nvidia_apt_mirror`) serves "
            "for this host: checked before it is installed. Unset: the sha256 pinned in "
            "data/nvidia.toml for the host's platform, else the fingerprint of NVIDIA's key "
            "it must carry. Needed for an http:// mirror, and for a mirror that signs with "
            "its own key."
        ),
        json_schema_extra=_allowed("64 lowercase hex digits, or unset"),
    )
    cuda_version: CudaVersion = Field(  # type: ignore[valid-type]
        _nvidia["default_cuda_version"],
        description="CUDA Toolkit release (installs `cuda-toolkit-<major>-<minor>`, no driver).",
        json_schema_extra=_allowed(_one_of(_nvidia["cuda_versions"])),
    )
    sglang_version: Annotated[str, VersionText, Field(pattern=RELEASE_PATTERN)] = Field(
        "0.5.23",
        description="SGLang release pinned in the virtualenv.",
        json_schema_extra=_allowed("a release number such as 0.5.23 or 0.5.9.post1"),
    )
    sglang_model_profile: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")] = Field(
        "glm-5-nvfp4",
        description="Model profile (model, quantization, backends, tuned flags) to serve.",
        json_schema_extra=_allowed("a profile name: lowercase letters, digits, '.', '-'"),
    )
    sglang_host: IPv4Address | IPv6Address = Field(
        ip_address("127.0.0.1"),
        description="Address the SGLang server binds to.",
        json_schema_extra=_allowed("an IP address; a non-loopback one needs sglang_api_key_file"),
    )
    sglang_port: Port = Field(
        30000,
        description="TCP port of the SGLang server.",
        json_schema_extra=_allowed("1..65535"),
    )
    sglang_api_key_file: OptionalPath = Field(
        None,
        description="File on the controller holding the API key (written 0600 on the host).",
        json_schema_extra=_allowed("a path on the controller, or unset"),
    )
    sglang_model_revision: (
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")] | None
    ) = Field(
        None,
        description=(
            "Revision of the profile's Hub model to download and serve: a commit (40 hex "
            "digits; a branch or tag is resolved to its commit before any change and "
            "reported). Unset: the commit the profile pins (its revision), else the "
            "repository's main branch, resolved the same way."
        ),
        json_schema_extra=_allowed("a commit, branch or tag of the model's repository"),
    )
    sglang_model_cache_dir: (
        Annotated[str, Field(pattern=SAFE_HOST_PATH), AfterValidator(_visible_to_the_service)]
        | None
    ) = Field(
        None,
        description=(
            "Hub cache folder the model is downloaded into and served from (HF_HUB_CACHE), on "
            "a filesystem with room for it: GPU hosts' root filesystems are often small. "
            "Unset: /var/lib/sglang/huggingface/hub. Not under /home, /root or /run/user (the "
            "sandboxed service cannot see them)."
        ),
        json_schema_extra=_allowed(
            "an absolute path of letters, digits, '.', '_', '-', '/' outside /home, /root, "
            "/run/user, or unset"
        ),
    )
    sglang_model_download_timeout_s: int = Field(
        21600,
        ge=60,
        le=604800,
        description=(
            "Seconds the model download may take before it is stopped (it resumes on the "
            "next run): GLM-5-NVFP4's 460.8 GB at 200 MB/s take about 38 minutes. It is "
            "the download unit's "
            "RuntimeMaxSec: at most 604800 (7 days, for slow links), well within what "
            "systemd parses (it ignores a span it cannot, and the limit with it)."
        ),
        json_schema_extra=_allowed("60..604800"),
    )
    hf_endpoint: HttpUrl | None = Field(
        None,
        description=(
            "Base URL of a Hugging Face Hub mirror (HF_ENDPOINT) for the model download and "
            "the planning that precedes it; unset: https://huggingface.co."
        ),
        json_schema_extra=_allowed("an http(s) URL, or unset"),
    )
    hf_token_file: OptionalPath = Field(
        None,
        description="File on the controller holding the Hugging Face token (written 0600).",
        json_schema_extra=_allowed("a path on the controller, or unset"),
    )
    pypi_index_url: HttpUrl = Field(
        HttpUrl("https://pypi.org/simple"),
        description="Python package index (or a mirror of it) for uv, SGLang and flash-attn.",
        json_schema_extra=_allowed("an http(s) URL of a PEP 503 simple index"),
    )
    uv_version: Annotated[str, VersionText, Field(pattern=r"^\d+(\.\d+)+$")] = Field(
        _python["uv"]["version"],
        description="uv release installed on the host (with pip, from `pypi_index_url`).",
        json_schema_extra=_allowed("a release number such as 0.13.9"),
    )
    python_version: Annotated[str, VersionText, Field(pattern=r"^3\.\d+$")] = Field(
        _python["venv"]["python"],
        description=(
            "Python of the SGLang virtualenv; the host's own when it has that version, "
            "else uv installs it."
        ),
        json_schema_extra=_allowed("3.N, such as 3.12"),
    )
    venv_path: Annotated[str, Field(pattern=SAFE_HOST_PATH)] = Field(
        None,  # filled in by _versioned_venv
        description=(
            "Where the SGLang virtualenv lives on the host; unset: one per SGLang, Python and "
            "CUDA release, `/opt/sglang/venvs/<sglang>-py<python>-cu<cuda>`, built beside the "
            "running one and switched to in the service step (the newest two are kept)."
        ),
        json_schema_extra=_allowed(
            "an absolute path of letters, digits, '.', '_', '-', '/', or unset"
        ),
    )
    torch_index_url: HttpUrl | None = Field(
        None,
        description=(
            "Index torch is installed from; unset: PyTorch's index for `cuda_version` "
            "(e.g. https://download.pytorch.org/whl/cu130)."
        ),
        json_schema_extra=_allowed("an http(s) URL of a PEP 503 simple index, or unset"),
    )
    flash_attn_version: Annotated[str, VersionText, Field(pattern=RELEASE_PATTERN)] = Field(
        _python["flash_attn"]["version"],
        description="flash-attn release built from source into the virtualenv.",
        json_schema_extra=_allowed("a release number such as 2.8.3"),
    )
    flash_attn_cuda_archs: list[FlashAttnArch] | None = Field(
        None,
        description=(
            "CUDA architectures flash-attn is built for, kept as flash-attn spells them "
            "(sm_90, 9.0 and 90 are all 90); unset: those of the GPUs found."
        ),
        json_schema_extra=_allowed(
            'a list such as ["90"], ["120"] or ["sm_90", "sm_120"] (90a: arch-specific), or unset'
        ),
    )
    flash_attn_memory_fraction: Annotated[float, BeforeValidator(_no_bool)] = Field(
        _python["flash_attn"]["memory_fraction"],
        gt=0,
        le=0.95,
        description="Share of available memory the flash-attn build's estimated peak may use.",
        json_schema_extra=_allowed("above 0, at most 0.95"),
    )
    sglang_profile_dirs: list[str] = Field(
        default_factory=list,
        description=(
            "Folders (relative to where pyinfra runs) searched for model profiles before the "
            "built-in ones: add profiles without touching code."
        ),
        json_schema_extra=_allowed("a list of folder paths"),
    )
    sglang_profile_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            'Profile values this host overrides, e.g. `{"model": "/models/glm-5", '
            '"tp_size": 4, "mem_fraction_static": 0.9}` (tp_size pins tensor parallelism).'
        ),
        json_schema_extra=_allowed("a mapping of profile fields to values"),
    )
    sglang_env: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
        Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f]*$")],
    ] = Field(
        default_factory=dict,
        description=(
            "Environment variables of this host's SGLang server, over the profile's env and the "
            'NCCL hints read from the host, e.g. `{"NCCL_P2P_LEVEL": "SYS"}` or '
            '`{"NCCL_P2P_DISABLE": "1"}` (either one replaces the P2P hint). Not for the '
            "variables pyinfra-sglang sets itself (caches, PATH, CUDA_HOME, HF_TOKEN, HF_HUB_*)."
        ),
        json_schema_extra=_allowed("a mapping of variable names to one-line values"),
    )
    sglang_multinode_group: str | None = Field(
        None,
        description=(
            "Inventory group whose hosts serve one model together (`--nnodes`; ranks in the "
            "group's order; the first host is the rendezvous)."
        ),
        json_schema_extra=_allowed("the name of a group this host is in, or unset"),
    )
    sglang_dist_init_port: Port = Field(
        50000,
        description="Port of the multi-node rendezvous on the group's first host.",
        json_schema_extra=_allowed("1..65535"),
    )
    sglang_multinode_trusted_network: bool = Field(
        False,
        description=(
            "Do the multi-node group's hosts talk over a private, trusted network? SGLang's "
            "inter-node transport deserializes pickles from TCP (sglang#24618) and torch, NCCL "
            "and ZMQ listen on all interfaces: a group with a public address is refused unless "
            "this says the network between them is trusted (a VPN, a firewalled fabric)."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    sglang_multinode_firewall: bool = Field(
        True,
        description=(
            "Write an nftables table on each member of the multi-node group that admits only "
            "the group's members to its rendezvous, ZMQ and NCCL ports (the rendezvous port "
            "and the pinned ephemeral range, data/multinode_firewall.toml). Needs each "
            "member's address (ssh_hostname, else its name) as an IP address."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    sglang_router_worker_urls: list[HttpUrl] = Field(
        default_factory=list,
        description=(
            "Data-parallel replicas to put SGLang's router in front of; when set, this host "
            "runs the router unit too."
        ),
        json_schema_extra=_allowed("a list of http(s) URLs of SGLang servers"),
    )
    sglang_rolling_batch: int = Field(
        1,
        ge=1,
        description=(
            "How many servers behind one router a deploy restarts at once: each waits for "
            "health before the next starts, the others keep serving. Servers behind no "
            "router restart together."
        ),
        json_schema_extra=_allowed("a whole number, 1 or more"),
    )
    sglang_router_host: IPv4Address | IPv6Address | None = Field(
        None,
        description=(
            "Address the router binds to; unset: 127.0.0.1, or `sglang_host` when that is a "
            "loopback address itself. Its Prometheus metrics listen on loopback only."
        ),
        json_schema_extra=_allowed(
            "an IP address, or unset; a non-loopback one needs sglang_router_api_key_file"
        ),
    )
    sglang_router_port: Port = Field(
        30080,
        description="TCP port of the router, on `sglang_router_host`.",
        json_schema_extra=_allowed("1..65535"),
    )
    sglang_router_api_key_file: OptionalPath = Field(
        None,
        description=(
            "File on the controller holding the router's API key: clients must present it, and "
            "the router presents it to the workers (give them the same key). Written 0600 on "
            "the host, never on a command line."
        ),
        json_schema_extra=_allowed("a path on the controller, or unset"),
    )
    sglang_metrics_public: bool = Field(
        False,
        description=(
            "May the server's unauthenticated /metrics and /health_generate be reached on a "
            "non-loopback sglang_host? SGLang serves them without the API key; a public bind "
            "with the profile's enable_metrics on is refused unless this is true."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    sglang_router_metrics_port: Port = Field(
        29000,
        description=(
            "Port of the router's Prometheus metrics, on loopback (the router's own address "
            "when that is loopback, else 127.0.0.1)."
        ),
        json_schema_extra=_allowed("1..65535"),
    )
    expected_gpu_count: Annotated[int | None, BeforeValidator(_no_bool)] = Field(
        None,
        ge=1,
        le=64,
        description="GPUs the host should have; the audit reports a mismatch.",
        json_schema_extra=_allowed("1..64, or unset to take what is found"),
    )
    expected_gpu_model: Annotated[str | None, AfterValidator(_known_gpu_model)] = Field(
        None,
        description=(
            "The GPU model the host has, as nvidia-smi names it: validation plans the "
            "memory fit, tensor parallelism and backends for it; the deploy refuses a host "
            "whose GPUs are another model and the audit reports one. Unset: validation "
            "assumes the largest GPU (data/gpus.toml) of the profile's architectures, and "
            "settings that fit it but not the GPUs the host has pass until the service step."
        ),
        json_schema_extra=_allowed(f"one of: {_one_of(gpu_names())}; or unset"),
    )
    bench_ab_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Profile settings side B of deploy/ab.py serves with (side A: the inventory's own), "
            'e.g. `{"cuda_graph": false}` (CUDA graphs off).'
        ),
        json_schema_extra=_allowed("profile fields, as in sglang_profile_overrides"),
    )
    tune_settings: list[str] | None = Field(
        None,
        description=(
            "Settings deploy/tune.py searches, in data/tuning.toml's order (unset: every one "
            "that applies to the host's SGLang release and GPUs)."
        ),
        json_schema_extra=_allowed("names of data/tuning.toml [settings]"),
    )
    tune_budget_s: Annotated[int, BeforeValidator(_no_bool)] = Field(
        7200,
        ge=600,
        le=7 * 86400,
        description=(
            "Seconds deploy/tune.py may search a host; refused up front when one trial (the "
            "profile's start timeout) cannot fit. A trial about to overrun it is not started."
        ),
        json_schema_extra=_allowed("600..604800"),
    )
    tune_concurrency: Annotated[int | None, BeforeValidator(_no_bool)] = Field(
        None,
        description=(
            "Concurrency whose output throughput deploy/tune.py maximizes (unset: the largest of "
            "bench_concurrencies)."
        ),
        json_schema_extra=_allowed("one of bench_concurrencies"),
    )
    tune_max_tpot_ms: float | None = Field(
        None,
        gt=0,
        le=60000,
        description="Latency limit of the tuner: settings whose median TPOT exceeds it lose.",
        json_schema_extra=_allowed("milliseconds, > 0"),
    )
    tune_max_ttft_ms: float | None = Field(
        None,
        gt=0,
        le=3600000,
        description="Latency limit of the tuner: settings whose median TTFT exceeds it lose.",
        json_schema_extra=_allowed("milliseconds, > 0"),
    )
    tune_keep: bool = Field(
        True,
        description=(
            "Leave the host on the tuner's winner (false: back on its starting settings, the "
            "inventory's own)."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    audit_report_dir: Annotated[str, Field(min_length=1)] = Field(
        "results/audit",
        description="Folder on the controller where deploy/audit.py writes `<host>.json`.",
        json_schema_extra=_allowed("a path, relative to where pyinfra runs or absolute"),
    )
    audit_link_probe: bool = Field(
        False,
        description=(
            "Should deploy/audit.py measure link bandwidth (host<->GPU, GPU<->GPU, "
            "NCCL all-reduce) with the venv's torch? Takes GPU memory and time while it runs."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    bench_concurrencies: Annotated[
        list[Annotated[int, BeforeValidator(_no_bool), Field(ge=1, le=4096)]],
        Field(min_length=1),
    ] = Field(
        default_factory=lambda: [1, 8, 32],
        description=(
            "Concurrent requests deploy/bench.py measures, one benchmark each "
            "(`--max-concurrency`)."
        ),
        json_schema_extra=_allowed("a non-empty list of 1..4096, such as [1, 8, 32]"),
    )
    bench_input_len: Annotated[int, BeforeValidator(_no_bool)] = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Prompt tokens of every benchmark request (`--random-input-len`).",
        json_schema_extra=_allowed("1..1000000"),
    )
    bench_output_len: Annotated[int, BeforeValidator(_no_bool)] = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Generated tokens of every benchmark request (`--random-output-len`).",
        json_schema_extra=_allowed("1..1000000"),
    )
    bench_prompts_per_concurrency: Annotated[int, BeforeValidator(_no_bool)] = Field(
        4,
        ge=1,
        le=1000,
        description=(
            "Requests per benchmark as a multiple of its concurrency (4: 32 requests at "
            "concurrency 8), at least 8."
        ),
        json_schema_extra=_allowed("1..1000"),
    )
    bench_repeat: Annotated[int, BeforeValidator(_no_bool)] = Field(
        1,
        ge=1,
        le=100,
        description="Times each concurrency is measured in one run (for the spread A/B compares).",
        json_schema_extra=_allowed("1..100"),
    )
    bench_regression_pct: Annotated[float, BeforeValidator(_no_bool)] = Field(
        10.0,
        gt=0,
        le=100,
        description=(
            "Output throughput drop (%) against the last run of the same settings that "
            "fails the host."
        ),
        json_schema_extra=_allowed("above 0, at most 100"),
    )
    bench_results_dir: Annotated[str, Field(min_length=1)] = Field(
        "results",
        description=(
            "Folder on the controller where deploy/bench.py writes `<host>/<UTC timestamp>/`."
        ),
        json_schema_extra=_allowed("a path, relative to where pyinfra runs or absolute"),
    )
    allow_reboot: bool = Field(
        False,
        description="May a deploy reboot the host (after a driver change)?",
        json_schema_extra=_allowed("true, false"),
    )
    reboot_timeout_s: Annotated[int, BeforeValidator(_no_bool), Field(ge=60, le=86400)] = Field(
        1800,
        description=(
            "Seconds a deploy waits for a host to come back from a reboot it made: bare-metal "
            "GPU servers spend minutes in POST and memory training before the OS boots."
        ),
        json_schema_extra=_allowed("60..86400"),
    )

    @model_validator(mode="before")
    @classmethod
    def _no_control_characters(cls, values: Any) -> Any:
        # Values end up in unit, env and YAML files: a newline would start a new setting, NUL
        # and CR make systemd refuse the unit. Checked before any field turns them into
        # something else (a URL parser drops tabs and newlines without a word).
        if isinstance(values, dict):
            for name, value in values.items():
                if _control_characters(value):
                    raise _field_error(
                        str(name),
                        "control characters (newline, tab, NUL, ...) cannot go into a unit, "
                        "env or config file",
                    )
        return values

    @model_validator(mode="before")
    @classmethod
    def _versioned_venv(cls, values: Any) -> Any:
        # A fixed path would be changed in place under the running server.
        if isinstance(values, dict) and values.get("venv_path") is None:
            release = {
                name: values.get(name) or cls.model_fields[name].default
                for name in ("sglang_version", "python_version", "cuda_version")
            }
            values = {**values, "venv_path": versioned_venv_path(**release)}
        return values

    def routed(self) -> bool:
        """Does this host run SGLang's router?"""
        return bool(self.sglang_router_worker_urls)

    def router_bind(self) -> IPv4Address | IPv6Address:
        """The router's address: sglang_router_host; unset, the server's own address when
        that is a loopback address, else 127.0.0.1."""
        if self.sglang_router_host is not None:
            return self.sglang_router_host
        return self.sglang_host if self.sglang_host.is_loopback else ip_address("127.0.0.1")

    def router_metrics_bind(self) -> IPv4Address | IPv6Address:
        """The router's Prometheus listener: the router's address when that is loopback, else
        127.0.0.1; never reachable from another host."""
        bind = self.router_bind()
        return bind if bind.is_loopback else ip_address("127.0.0.1")

    @model_validator(mode="after")
    def _public_bind_needs_api_key(self) -> HostConfig:
        if not self.sglang_host.is_loopback and self.sglang_api_key_file is None:
            raise _field_error(
                "sglang_host",
                f"binding to {self.sglang_host} (not loopback) without an API key; "
                "set sglang_api_key_file or bind to 127.0.0.1",
            )
        router = self.router_bind()
        if self.routed() and not router.is_loopback and self.sglang_router_api_key_file is None:
            raise _field_error(
                "sglang_router_host",
                f"the router would bind to {router} (not loopback) without an API key, open "
                "to whoever reaches it; set sglang_router_api_key_file or bind it to 127.0.0.1",
            )
        return self

    @model_validator(mode="after")
    def _plain_http_mirror_needs_a_pinned_keyring(self) -> HostConfig:
        # Over http anyone on the path can swap the keyring, and with it every package's
        # signature check; a pinned sha256 makes the download's transport irrelevant.
        mirror = self.nvidia_apt_mirror
        if mirror is not None and mirror.scheme == "http" and not self.nvidia_keyring_sha256:
            raise _field_error(
                "nvidia_apt_mirror",
                f"{mirror.scheme}:// mirror without nvidia_keyring_sha256: the keyring it "
                "serves is the trust anchor of every NVIDIA package. Use https://, or pin the "
                "keyring's sha256 in nvidia_keyring_sha256",
            )
        return self

    @model_validator(mode="after")
    def _driver_version_on_branch(self) -> HostConfig:
        version = self.nvidia_driver_version
        if version and not version.startswith(f"{self.nvidia_driver_branch}."):
            raise _field_error(
                "nvidia_driver_version",
                f"{version} is not a release of nvidia_driver_branch "
                f"{self.nvidia_driver_branch}: set the branch to {version.split('.')[0]}, or a "
                f"version {self.nvidia_driver_branch}.x",
            )
        if version and self.nvidia_driver_update_within_branch:
            raise _field_error(
                "nvidia_driver_update_within_branch",
                f"nvidia_driver_version {version} locks one release; moving within the branch "
                "contradicts it. Unset one of them",
            )
        return self

    @model_validator(mode="after")
    def _driver_runs_the_toolkit(self) -> HostConfig:
        # A branch older than the toolkit's minimum runs its programs only through
        # minor-version compatibility (limited: no JIT of newer PTX): not planned on.
        from pyinfra_sglang.nvidia import TOOLKIT_SOURCE, driver_below_toolkit

        why = driver_below_toolkit(
            self.cuda_version, self.nvidia_driver_branch, self.nvidia_driver_version
        )
        if why:
            # The branch itself, or the release within a branch that would do.
            field = "nvidia_driver_branch" if why.startswith("branch") else "nvidia_driver_version"
            raise _field_error(
                field,
                f"{why} (cuda_version {self.cuda_version}; {TOOLKIT_SOURCE}). Choose a newer "
                "driver, or an older cuda_version",
            )
        return self

    @model_validator(mode="after")
    def _nccl_p2p_values(self) -> HostConfig:
        # A misspelt level makes NCCL warn and fall back to its default silently.
        problem = check_p2p_env(self.sglang_env)
        if problem:
            raise _field_error("sglang_env", problem)
        return self

    @model_validator(mode="after")
    def _tuner_settings(self) -> HostConfig:
        known = load_space().names()
        unknown = [name for name in self.tune_settings or [] if name not in known]
        if unknown:
            raise _field_error(
                "tune_settings", f"unknown settings {unknown}; allowed: {', '.join(known)}"
            )
        if self.tune_concurrency is not None and self.tune_concurrency not in (
            self.bench_concurrencies
        ):
            raise _field_error(
                "tune_concurrency",
                f"{self.tune_concurrency} is not measured; allowed: one of bench_concurrencies "
                f"{list(self.bench_concurrencies)}",
            )
        return self

    @model_validator(mode="after")
    def _one_listener_per_port(self) -> HostConfig:
        # The ports this host listens on (the router's only where it runs, the rendezvous
        # only in a multi-node group) must differ: a second listener on a port fails to start.
        in_use = {"sglang_port": self.sglang_port}
        if self.routed():
            in_use["sglang_router_port"] = self.sglang_router_port
            in_use["sglang_router_metrics_port"] = self.sglang_router_metrics_port
        if self.sglang_multinode_group:
            in_use["sglang_dist_init_port"] = self.sglang_dist_init_port
        seen: dict[int, str] = {}
        for name, port in in_use.items():
            if port in seen:
                raise _field_error(
                    name,
                    f"port {port} is also {seen[port]}; each listener of a host needs its own "
                    f"port ({', '.join(in_use)})",
                )
            seen[port] = name
        return self


@dataclass(frozen=True)
class Problem:
    """One bad value in one host's data."""

    host: str
    field: str
    value: str
    source: str
    message: str
    allowed: str

    def __str__(self) -> str:
        return (
            f"host {self.host}: {self.field} = {self.value} (from {self.source}): "
            f"{self.message}; allowed: {self.allowed}"
        )


class InventoryError(PyinfraError):
    """Bad inventory data; raised before any host is changed."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [f"invalid inventory, nothing was changed ({len(problems)} problem(s)):"]
        lines += [f"  - {problem}" for problem in problems]
        super().__init__("\n".join(lines))


@cache
def pyinfra_data_keys() -> frozenset[str]:
    """Keys pyinfra itself reads from host data: connector data and global arguments."""
    from pyinfra.api.arguments import all_global_arguments
    from pyinfra.api.connectors import get_all_connectors

    keys = {name for name, _ in all_global_arguments() if name.startswith("_")}
    for connector in get_all_connectors().values():
        keys.update(connector.data_meta)
    return frozenset(keys)


def field_allowed(name: str) -> str:
    extra = HostConfig.model_fields[name].json_schema_extra or {}
    return str(extra.get("allowed", ""))  # type: ignore[union-attr]


# A URL's user and password (``https://user:pass@host``): never shown, whatever the field.
_URL_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)([^/?#@\s'\"]+)@")
# Names of credentials, as redact.py knows them: a flag (``--api-key``) or a key
# (``HF_TOKEN``, ``my_password``) whose value is a secret.
_CREDENTIAL = r"(?:api[_-]?key|token|secret|password|passwd)"
_SECRET_FLAG = re.compile(rf"(?i)^--[A-Za-z0-9-]*?{_CREDENTIAL}$")
_SECRET_KEY = re.compile(rf"(?i)^[A-Za-z0-9_-]*?{_CREDENTIAL}$")


def _secret_flag(arg: str) -> bool:
    from pyinfra_sglang.profiles import SECRET_SERVER_FLAGS, managed_flag_in

    name = arg.split("=", 1)[0]
    return bool(_SECRET_FLAG.match(name)) or managed_flag_in(name) in SECRET_SERVER_FLAGS


def _url_secrets(text: str) -> list[str]:
    from urllib.parse import unquote, urlsplit

    try:
        userinfo = urlsplit(text.strip()).netloc.rpartition("@")[0]
    except ValueError:
        return []
    parts = (userinfo, *userinfo.split(":", 1))
    return [form for part in parts if part for form in (part, unquote(part))]


def _secrets_in(value: Any) -> list[str]:
    """Secret values inside host data: the user and password of any URL, the value of any
    credential flag in a list of arguments (``["--api-key", "sk-..."]``, ``--api-key=sk-...``)
    and of any credential-named key (``{"HF_TOKEN": "hf_..."}``)."""
    found: list[str] = []
    if isinstance(value, (HttpUrl, Path)):
        value = str(value)
    if isinstance(value, str):
        if "://" in value and "@" in value:
            found += _url_secrets(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and isinstance(item, str) and _SECRET_KEY.match(key):
                found.append(item)
            found += _secrets_in(item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found += _secrets_in(item)
            if not isinstance(item, str) or not _secret_flag(item):
                continue
            if "=" in item:
                found.append(item.split("=", 1)[1])
            elif index + 1 < len(value) and isinstance(value[index + 1], str):
                found.append(value[index + 1])
    return [secret.strip() for secret in found if secret and secret.strip()]


def mask_secrets(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """``text`` as a problem may show it: each of ``secrets`` (as written, in a repr, in JSON)
    where it stands as a word of its own, and every URL's user and password, replaced by
    the mask."""
    import json

    from pyinfra_sglang.redact import mask_text

    mask = mask_text()
    spellings = {form for secret in secrets for form in (secret, repr(secret)[1:-1])}
    spellings |= {json.dumps(secret)[1:-1] for secret in secrets}
    # Longest first: a secret that contains another is replaced whole. Not inside a longer
    # word: a secret "x" leaves "extra_args" alone.
    for spelling in sorted(spellings, key=len, reverse=True):
        pattern = rf"(?<![A-Za-z0-9_]){re.escape(spelling)}(?![A-Za-z0-9_])"
        text = re.sub(pattern, lambda _: mask, text)
    return _URL_USERINFO.sub(lambda m: f"{m[1]}{mask}@", text)


def _masked(problems: list[Problem], values: dict[str, Any]) -> list[Problem]:
    """``problems`` with no secret of ``values`` (a host's data) in their text; the values
    shown go through redact() too (credentials found by their form)."""
    from dataclasses import replace

    from pyinfra_sglang.redact import redact

    secrets = _secrets_in(values)
    return [
        replace(
            problem,
            value=mask_secrets(redact(problem.value), secrets),
            message=mask_secrets(problem.message, secrets),
            allowed=mask_secrets(problem.allowed, secrets),
        )
        for problem in problems
    ]


def validate_host_data(
    host: str, values: dict[str, Any], source_of: dict[str, str] | None = None
) -> tuple[HostConfig | None, list[Problem]]:
    """Validate one host's data; return its config (None when invalid) and the problems,
    secrets masked (URL passwords, credential flags' values)."""
    config, problems = _validate_host_data(host, values, source_of)
    return config, _masked(problems, values)


def _validate_host_data(
    host: str, values: dict[str, Any], source_of: dict[str, str] | None = None
) -> tuple[HostConfig | None, list[Problem]]:
    source_of = source_of or {}
    fields = HostConfig.model_fields
    ours = {key: value for key, value in values.items() if key in fields}
    problems = [
        _unknown_key_problem(host, key, source_of.get(key, "host data"))
        for key in sorted(values)
        if key not in fields
        and key not in pyinfra_data_keys()
        and not key.startswith(USER_KEY_PREFIX)
    ]
    try:
        config = HostConfig(**ours)
    except ValidationError as error:
        problems += [_validation_problem(host, item, ours, source_of) for item in error.errors()]
        return None, problems
    return (None if problems else config), problems


def _unknown_key_problem(host: str, key: str, source: str) -> Problem:
    close = difflib.get_close_matches(key, list(HostConfig.model_fields), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return Problem(
        host=host,
        field=key,
        # Unknown keys may hold anything, secrets included: never echo them.
        value="(value not shown)",
        source=source,
        message="unknown key",
        allowed=(
            f"a field of the inventory reference (docs/inventory.md){hint}, pyinfra's own "
            "connector data or global arguments, or a key of your own prefixed "
            f"'{USER_KEY_PREFIX}'"
        ),
    )


def _validation_problem(
    host: str, item: dict[str, Any], values: dict[str, Any], source_of: dict[str, str]
) -> Problem:
    # Model-level rules (loc == ()) name their field in the error's context (_field_error).
    name = str((item.get("ctx") or {}).get("field") or (item["loc"][0] if item["loc"] else ""))
    if name not in HostConfig.model_fields:
        name = "sglang_host"
    value = values.get(name, HostConfig.model_fields[name].default)
    message = str(item["msg"]).removeprefix("Value error, ")
    return Problem(
        host=host,
        field=name,
        value=repr(value) if not isinstance(value, (IPv4Address, IPv6Address)) else str(value),
        source=source_of.get(name, "default"),
        message=message,
        allowed=field_allowed(name),
    )


def _host_values_and_sources(host: Host) -> tuple[dict[str, Any], dict[str, str]]:
    """A host's merged data and, for each key, where its winning value was set."""
    inventory = host.inventory
    layers: list[tuple[str, dict[str, Any]]] = [
        ("--data", inventory.get_override_data()),
        ("host data", inventory.get_host_data(host.name)),
    ]
    # pyinfra lets the last group win, so look at the groups from last to first.
    layers += [
        (f"group {group}", inventory.get_group_data(group)) for group in reversed(host.groups)
    ]
    layers.append(("group all", inventory.get_data()))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, layer in layers:
        for key, value in layer.items():
            if key not in values:
                values[key] = value
                sources[key] = source
    return values, sources


def host_profile(config: HostConfig):
    """The host's model profile with its inventory overrides applied (ProfileError if bad)."""
    from pyinfra_sglang.profiles import load_profile, merge_overrides

    profile = load_profile(config.sglang_model_profile, config.sglang_profile_dirs)
    return merge_overrides(profile, config.sglang_profile_overrides)


def _profile_field(config: HostConfig) -> str:
    return "sglang_profile_overrides" if config.sglang_profile_overrides else "sglang_model_profile"


def member_address(member: Host) -> str:
    """The address a group member is reached at: its ssh_hostname, else its name."""
    return str(member.data.get("ssh_hostname") or member.name)


def multinode_member_addresses(config: HostConfig, host: Host) -> list[str]:
    """The addresses of the host's multi-node group, in the group's order; [] outside one."""
    if not config.sglang_multinode_group:
        return []
    return [member_address(m) for m in host.inventory.get_group(config.sglang_multinode_group)]


def _url_names(host: Host, config: HostConfig) -> set[str]:
    """The names a router's worker URL may give this host by."""
    names = {host.name, member_address(host), str(config.sglang_host)}
    return {name.strip("[]").lower() for name in names}


def rolling_group(host: Host) -> str | None:
    """The router this host's server stands behind (its worker URLs name the host and its
    port), as "router <name>": a deploy restarts that router's servers a batch at a time.
    None behind no router, or in a multi-node group (its members restart together)."""
    config = host_config(host)
    if config.sglang_multinode_group:
        return None
    routers = _routers_by_worker(host.inventory)
    keys = [(name, config.sglang_port) for name in _url_names(host, config)]
    listed = [routers[key] for key in keys if key in routers]
    # The first router in the inventory's order that lists it, by any of its names.
    return f"router {min(listed)[1]}" if listed else None


# Inventory -> its routers by worker; weak, so an inventory gone leaves no stale entry.
_routers: WeakKeyDictionary = WeakKeyDictionary()


def _routers_by_worker(inventory: Inventory) -> dict[tuple[str, int | None], tuple[int, str]]:
    """(worker host, port) -> (position, name) of the first router listing it; built once
    per inventory (every host asks, several times a run)."""
    if inventory not in _routers:
        found: dict[tuple[str, int | None], tuple[int, str]] = {}
        for position, router in enumerate(inventory):
            for url in host_config(router).sglang_router_worker_urls:
                name = (url.host or "").strip("[]").lower()
                found.setdefault((name, url.port), (position, router.name))
        _routers[inventory] = found
    return _routers[inventory]


def node_position_in(config: HostConfig, host: Host):
    """The host's place in its multi-node group, from the inventory alone (the group's order;
    the first member's ssh_hostname, else its name, is the rendezvous)."""
    from pyinfra_sglang.service_files import node_position

    if not config.sglang_multinode_group:
        return node_position(config, host.name, [host.name], None)
    members = [member.name for member in host.inventory.get_group(config.sglang_multinode_group)]
    return node_position(
        config, host.name, members, member_address(host.inventory.get_host(members[0]))
    )


def _render_problem(config: HostConfig, error: PyinfraError) -> tuple[str, str]:
    """The field a render refusal is about, and its message."""
    from pyinfra_sglang.render import GpuFitError, RenderError, TensorParallelError
    from pyinfra_sglang.sglang_flags import FlagVersionError

    planned = f"(GPUs planned: {_planned_gpus_text(config)})"
    if isinstance(error, TensorParallelError) and error.from_profile:
        return _profile_field(config), f"{error} {planned}"
    if isinstance(error, GpuFitError):
        if _expected_model_off_profile(config):
            return "expected_gpu_model", f"{error} {planned}"
        field = "expected_gpu_count" if config.expected_gpu_count else _profile_field(config)
        return field, f"{error} {planned}"
    if isinstance(error, FlagVersionError):
        # A release may be refused for the GPUs' architecture alone: say which were planned.
        return "sglang_version", f"{error} {planned}"
    if isinstance(error, RenderError) and error.field in HostConfig.model_fields:
        return str(error.field), str(error)
    return _profile_field(config), str(error)


def _expected_model_off_profile(config: HostConfig) -> bool:
    """Is expected_gpu_model of an architecture the profile does not run on?"""
    if not config.expected_gpu_model:
        return False
    try:
        archs = host_profile(config).archs
    except PyinfraError:
        return False
    return archs is not None and gpu_by_name(config.expected_gpu_model).arch not in archs


def _planned_gpus_text(config: HostConfig) -> str:
    from pyinfra_sglang.service_files import planned_gpu

    try:
        spec = planned_gpu(host_profile(config), config.expected_gpu_model)
    except PyinfraError:
        return "unknown"
    count = config.expected_gpu_count or "as many as the profile needs"
    if config.expected_gpu_model:
        why = "expected_gpu_model"
    else:
        why = "unset expected_gpu_model: the largest of the profile's architectures"
    return f"{count} x {spec.name if spec else 'an unknown GPU'}, {why}"


def _service_problems(
    host: Host, config: HostConfig, source_of: dict[str, str], warn: Callable[[str], None]
) -> list[Problem]:
    """What the SGLang service would refuse, found before any host changes: the multi-node
    group, the profile and its overrides, the secret files, and the service's files rendered
    whole (masked) for the GPUs the inventory plans for: the flags of the pinned release, the
    fit, anything that cannot go into a unit, env or config file. Side B of an A/B too."""
    from pyinfra_sglang.service_files import (
        SECRET_FIELDS,
        SecretFileError,
        read_secret,
    )

    def problem(field: str, message: str, allowed: str | None = None) -> Problem:
        value = getattr(config, field)
        if isinstance(value, (IPv4Address, IPv6Address)):
            shown = str(value)
        else:
            shown = repr(str(value) if isinstance(value, Path) else value)
        return Problem(
            host.name,
            field,
            shown,
            source_of.get(field, "default"),
            message,
            field_allowed(field) if allowed is None else allowed,
        )

    groups = list(host.groups)
    if config.sglang_multinode_group and config.sglang_multinode_group not in groups:
        return [
            problem(
                "sglang_multinode_group",
                f"this host is not in group {config.sglang_multinode_group}",
                f"one of this host's groups: {', '.join(groups)}",
            )
        ]
    problems = []
    for field in SECRET_FIELDS:
        try:
            read_secret(getattr(config, field), field, host.name, warn)
        except SecretFileError as error:
            problems.append(problem(field, error.reason))
    problems += _mok_problems(host, config, problem, warn)
    problems += _driver_problems(config, problem)
    problems += _exposure_problems(host, config, problem)
    node = node_position_in(config, host)
    sides = [("", config)]
    if config.bench_ab_overrides:
        sides.append(("bench_ab_overrides", ab_side_b(config)))
    for side_field, side in sides:
        try:
            _planned_service_files(side, node, host_profile(side))
        except PyinfraError as error:
            field, message = _render_problem(side, error)
            problems.append(problem(side_field or field, message))
    # A router with no release pinned for the SGLang release is refused by the render above
    # (service_files reads the pin to spell the gateway's command line).
    return problems


def _planned_service_files(config: HostConfig, node, profile):
    """service_files.planned_service_files, with the GPU count it plans (where the inventory
    leaves expected_gpu_count and the profile tp_size unset) raised to one the model's heads
    can be split over: the fewest that hold the profile (3 x 180 GB for GLM-5) may be a
    count tensor parallelism cannot use, and no host is built with it."""
    from dataclasses import replace

    from pyinfra_sglang.render import fewest_gpus_for
    from pyinfra_sglang.service_files import (
        masked_secrets,
        planned_gpu,
        planned_gpus,
        service_files_for,
    )

    gpus = planned_gpus(config, profile, node.nnodes)
    if config.expected_gpu_count is None and profile.tp_size is None:
        total = fewest_gpus_for(profile, None, gpus.count * node.nnodes)
        while total is not None and total % node.nnodes:
            total = fewest_gpus_for(profile, None, total + 1)
        if total is not None and total != gpus.count * node.nnodes:
            spec = planned_gpu(profile, config.expected_gpu_model)
            count = total // node.nnodes
            gpus = replace(
                gpus,
                count=count,
                pcie_only=count > 1 and spec is not None and not spec.nvlink,
            )
    return service_files_for(config, gpus, node, masked_secrets(config), True, profile)


def _driver_problems(config: HostConfig, problem: Callable[..., Problem]) -> list[Problem]:
    """A driver branch or kernel module flavor that can run none of the GPU architectures the
    profile runs on (proprietary modules for a Blackwell-only profile): the driver would
    install and find no GPU. GPUs a host reports are checked again by the driver role."""
    from pyinfra_sglang.nvidia import driver_mismatches

    try:
        archs = host_profile(config).archs or []
    except PyinfraError:  # the profile's own problem is reported with the render
        return []
    found = {
        arch: driver_mismatches(arch, config.nvidia_driver_branch, config.nvidia_kernel_modules)
        for arch in archs
    }
    if not archs or not all(found.values()):
        return []
    by_field: dict[str, list] = {}
    for mismatches in found.values():
        for mismatch in mismatches:
            by_field.setdefault(mismatch.field, []).append(mismatch)
    return [
        problem(
            field,
            f"the profile runs on {', '.join(archs)} only: "
            + "; ".join(m.message for m in mismatches),
            "; ".join(dict.fromkeys(m.allowed for m in mismatches)),
        )
        for field, mismatches in by_field.items()
    ]


def _mok_problems(
    host: Host, config: HostConfig, problem: Callable[..., Problem], warn
) -> list[Problem]:
    """The MOK key pair, read on the controller: both files, a PEM key and a DER
    certificate; a warning when others can read the private key."""
    from pyinfra_sglang.secure_boot import MokFileError, key_readable_by_others, read_mok_pair

    try:
        pair = read_mok_pair(config.nvidia_mok_key_file, config.nvidia_mok_cert_file)
    except MokFileError as error:
        return [problem(error.field, str(error))]
    if pair and warn and key_readable_by_others(config.nvidia_mok_key_file):
        warn(
            f"warning: host {host.name}: nvidia_mok_key_file {config.nvidia_mok_key_file} can be "
            "read by group or others (chmod 600 it)"
        )
    return []


def _public_address(address: str) -> bool:
    """An IP literal that is globally routable; a name cannot be judged without DNS."""
    try:
        return ip_address(address.strip("[]")).is_global
    except ValueError:
        return False


def _exposure_problems(
    host: Host, config: HostConfig, problem: Callable[..., Problem]
) -> list[Problem]:
    """Control planes a host would open to whoever reaches it: a multi-node group on public
    addresses, the server's unauthenticated /metrics on a public bind."""
    problems = []
    if config.sglang_multinode_group and not config.sglang_multinode_trusted_network:
        members = host.inventory.get_group(config.sglang_multinode_group)
        public = [
            f"{member.name} ({address})"
            for member in members
            if _public_address(address := member_address(member))
        ]
        if public:
            problems.append(
                problem(
                    "sglang_multinode_group",
                    f"members on public addresses: {', '.join(public)}; SGLang's inter-node "
                    "transport unpickles what arrives over TCP and NCCL/ZMQ listen on every "
                    "interface. Put the group on a private network, or set "
                    "sglang_multinode_trusted_network: true if the network between them is "
                    "trusted (a VPN, a firewalled fabric)",
                    "a group whose members have private addresses, or "
                    "sglang_multinode_trusted_network: true",
                )
            )
    problems += _firewall_problems(host, config, problem)
    try:
        metrics_on = host_profile(config).enable_metrics
    except PyinfraError:  # the profile's own problem is reported with the render
        metrics_on = False
    public_bind = not config.sglang_host.is_loopback
    if public_bind and not config.sglang_metrics_public and metrics_on:
        problems.append(
            problem(
                "sglang_host",
                f"binding to {config.sglang_host} with the profile's enable_metrics on serves "
                "/metrics and /health_generate without the API key to whoever reaches it; set "
                "sglang_metrics_public: true if that is meant, turn metrics off "
                '(sglang_profile_overrides: {"enable_metrics": false}) or bind to 127.0.0.1',
                "a loopback address, or sglang_metrics_public: true, or metrics off",
            )
        )
    return problems


def _ip_literal(address: str) -> bool:
    try:
        ip_address(address.strip("[]"))
    except ValueError:
        return False
    return True


def _scoped_ipv6(address: str) -> bool:
    """An IPv6 literal with a zone (``fe80::1%eth0``), which no nftables set takes."""
    try:
        parsed = ip_address(address.strip("[]"))
    except ValueError:
        return False
    return isinstance(parsed, IPv6Address) and parsed.scope_id is not None


def _firewall_problems(
    host: Host, config: HostConfig, problem: Callable[..., Problem]
) -> list[Problem]:
    """The multi-node firewall admits members by address: each must be an IP, and no port
    clients use may fall in the ranges it closes."""
    if not (config.sglang_multinode_group and config.sglang_multinode_firewall):
        return []
    problems = []
    names = [
        f"{member.name} ({address})"
        for member in host.inventory.get_group(config.sglang_multinode_group)
        if not _ip_literal(address := member_address(member))
    ]
    if names:
        problems.append(
            problem(
                "sglang_multinode_firewall",
                f"members without an IP address: {', '.join(names)}; the firewall admits the "
                "group's members by address. Set each member's ssh_hostname to its IP, or "
                "sglang_multinode_firewall: false where the network is firewalled elsewhere",
                "members with IP addresses, or sglang_multinode_firewall: false",
            )
        )
    scoped = [
        f"{member.name} ({address})"
        for member in host.inventory.get_group(config.sglang_multinode_group)
        if _scoped_ipv6(address := member_address(member))
    ]
    if scoped:
        problems.append(
            problem(
                "sglang_multinode_firewall",
                f"members with a scoped IPv6 address: {', '.join(scoped)}; the firewall's "
                "nftables sets take plain addresses, without a zone (%eth0): nft refuses "
                "the rules. Give each member a global or unique-local address (not "
                "link-local fe80::/10) as its ssh_hostname, or sglang_multinode_firewall: "
                "false where the network is firewalled elsewhere",
                "members with IP addresses without a %zone, or sglang_multinode_firewall: false",
            )
        )
    client_ports = {"sglang_port": config.sglang_port}
    if config.routed():
        client_ports["sglang_router_port"] = config.sglang_router_port
    ranges = ", ".join(f"{lo}-{hi}" for lo, hi in filtered_ports(config.sglang_dist_init_port))
    for field, port in client_ports.items():
        if port_in_filtered_ranges(port, config.sglang_dist_init_port):
            problems.append(
                problem(
                    field,
                    f"port {port} is in the ports the multi-node firewall closes to all but "
                    f"the group's members ({ranges}): clients could not reach it",
                    f"a port outside {ranges}",
                )
            )
    return problems


# pyinfra's own default for ssh_strict_host_key_checking: it is passed to paramiko and so
# overrides StrictHostKeyChecking in ~/.ssh/config.
SSH_DEFAULT_HOST_KEY_CHECKING = "accept-new"


def _ssh_problems(
    host: Host, values: dict[str, Any], source_of: dict[str, str], warn: Callable[[str], None]
) -> list[Problem]:
    """Refuse SSH settings that accept any host key; warn about accept-new (pyinfra's
    default), which trusts a host's key the first time it is seen."""
    from pyinfra.connectors.ssh import SSHConnector

    if getattr(host, "connector_cls", SSHConnector) is not SSHConnector:
        return []
    field = "ssh_strict_host_key_checking"
    value = values.get(field)
    source = source_of.get(field, "pyinfra's default")
    allowed = "yes (with ssh_known_hosts_file pre-seeded: docs/security.md), ask, accept-new"
    if value is False or (isinstance(value, str) and value.lower() in ("no", "off")):
        return [
            Problem(
                host.name,
                field,
                repr(value),
                source,
                "accepts any host key: whoever answers on the host's address gets the "
                "inventory's secrets",
                allowed,
            )
        ]
    if value is not None and value not in ("yes", "ask", "accept-new"):
        return [Problem(host.name, field, repr(value), source, "not an SSH setting", allowed)]
    if value is None or value == "accept-new":
        shown = "unset (pyinfra's default: accept-new)" if value is None else "'accept-new'"
        warn(
            f"warning: host {host.name}: {field} = {shown} (from {source}): a host key never "
            "seen before is trusted on first connection, and pyinfra's value overrides "
            'StrictHostKeyChecking in ~/.ssh/config; set it to "yes" with '
            "ssh_known_hosts_file pre-seeded (docs/security.md)"
        )
    return []


def ab_side_b(config: HostConfig) -> HostConfig:
    """The host's config with bench_ab_overrides laid over its profile overrides: what side
    B of an A/B serves."""
    overrides = {**config.sglang_profile_overrides, **config.bench_ab_overrides}
    return config.model_copy(update={"sglang_profile_overrides": overrides})


def validate_inventory(
    inventory: Inventory, warn: Callable[[str], None] | None = None
) -> dict[str, HostConfig]:
    """Validate every host of ``inventory``; raise InventoryError listing all problems.
    Warnings (weaker SSH settings, readable secret files) go to ``warn``, by default
    pyinfra's logger."""
    warn = warn or logger.warning
    configs: dict[str, HostConfig] = {}
    problems: list[Problem] = []
    for host in inventory:
        values, sources = _host_values_and_sources(host)
        config, host_problems = validate_host_data(host.name, values, sources)
        host_problems += _ssh_problems(host, values, sources, warn)
        if config is not None:
            host_problems += _service_problems(host, config, sources, warn)
        host_problems = _masked(host_problems, values)
        problems += host_problems
        if config is not None and not host_problems:
            configs[host.name] = config
    if problems:
        raise InventoryError(problems)
    return configs


# Validated once per inventory object: the deploy file runs once per host. Keyed weakly by
# the object itself, not its id(): a freed inventory's id is reused by the next one, which
# then got the stale configs.
_validated: WeakKeyDictionary[Inventory, dict[str, HostConfig]] = WeakKeyDictionary()


def host_config(host: Host) -> HostConfig:
    """The validated config of ``host``; validates the whole inventory on first use."""
    inventory = host.inventory
    if inventory not in _validated:
        _validated[inventory] = validate_inventory(inventory)
    return _validated[inventory][host.name]


class InventoryFileError(InventoryError):
    """An inventory file that cannot be read or run (not text, a syntax error, an exception)."""

    def __init__(self, message: str):
        self.problems = []
        PyinfraError.__init__(self, message)


def load_inventory_file(path: str, override_data: dict[str, Any] | None = None) -> Inventory:
    """Load an inventory the way the pyinfra CLI does, without connecting to any host.
    InventoryFileError, never a traceback, when the file is not a Python inventory."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.exceptions import UnexpectedExternalError
    from pyinfra_cli.inventory import make_inventory

    # pyinfra caches compiled files by the name given: make it absolute, so two inventories
    # called inv.py in two folders stay two.
    if Path(path).exists():
        path = str(Path(path).resolve())
    # pyinfra executes inventory files inside a State context.
    try:
        with ctx_state.use(State()):
            return make_inventory(path, override_data=override_data or {}, cwd=str(Path.cwd()))
    except UnicodeDecodeError as error:
        raise InventoryFileError(
            f"cannot read inventory {path}: not UTF-8 text (byte {error.start}); an inventory "
            "is a Python file"
        ) from None
    except (SyntaxError, ValueError) as error:
        raise InventoryFileError(f"cannot read inventory {path}: {error}") from None
    except OSError as error:
        raise InventoryFileError(f"cannot read inventory {path}: {error.strerror}") from None
    except UnexpectedExternalError as error:
        inner = error.exception
        line = getattr(inner, "lineno", None)
        traceback = getattr(inner, "_traceback", None)
        while traceback is not None and traceback.tb_next is not None:
            traceback = traceback.tb_next
        line = line or (traceback.tb_lineno if traceback is not None else None)
        where = f" (line {line})" if line else ""
        raise InventoryFileError(
            f"inventory {error.filename}{where} raised {type(inner).__name__}: {inner}"
        ) from None


def _format_default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`"


def with_reference(text: str) -> str:
    """``text`` (docs/inventory.md) with its generated inventory reference block, between its
    ``inventory-reference`` markers, brought up to date."""
    from pyinfra_sglang.reference_docs import replace_block

    return replace_block(text, "inventory-reference", reference_markdown())


def reference_markdown() -> str:
    """The inventory reference table in docs/inventory.md, generated from the model."""
    rows = [
        "| field | default | allowed | what it sets |",
        "| --- | --- | --- | --- |",
    ]
    for name, info in HostConfig.model_fields.items():
        # get_default: list fields have a default_factory, whose value is the default shown.
        default = _format_default(info.get_default(call_default_factory=True))
        rows.append(f"| `{name}` | {default} | {field_allowed(name)} | {info.description} |")
    return "\n".join(rows) + "\n"
