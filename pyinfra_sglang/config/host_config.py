"""The inventory model: every value pyinfra-sglang reads from host and group data.

One pydantic class, ``HostConfig``, holds the fields with their defaults, grouped by the role
that reads them; each value is checked here on its own or against the host's other values.
What needs more than one host's values (the service rendered whole, the multi-node group,
SSH settings) is checked in validation.py and semantic_checks.py.

How to add a field:

1. The field goes in ``HostConfig``, in the section of the role that reads it (a section
   comment names the roles), with a working default: a host without it must deploy as before.
2. Its type says what is allowed: a pattern, a range (``ge``/``le``), a ``Literal`` from data
   (``DriverBranch``), a ``BeforeValidator`` for what pyinfra's ``--data`` turns into another
   type (``VersionText``, ``_no_bool``), an ``AfterValidator`` for a rule of its own. A rule
   across fields is a ``model_validator(mode="after")`` that raises ``_field_error(field,
   message)``, so the problem names the field. A rule that renders the service or reads other
   hosts goes in semantic_checks.py.
3. Its reference text: ``description=`` (what it sets) and ``json_schema_extra=_allowed(...)``
   (what is allowed; the same text every problem about it shows). docs/inventory.md's table
   is generated from them: ``uv run python -m pyinfra_sglang.docgen.reference_docs`` rewrites it,
   tests/unit/test_reference_docs.py fails until it is.
4. Tests: a good and a refused value in tests/unit/test_inventory_model.py (or
   test_validation_limits.py for limits), and a test of the role that reads it.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    HttpUrl,
    StrictBool,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pyinfra_sglang import data
from pyinfra_sglang.arch import FlashAttnArch
from pyinfra_sglang.gpus import UnknownGpuError, gpu_by_name, gpu_names
from pyinfra_sglang.host.p2p import check_p2p_env
from pyinfra_sglang.serving.sglang_flags import unread_release

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


def _no_scope(address: IPv4Address | IPv6Address) -> IPv4Address | IPv6Address:
    # Python's IPv6Address takes any text after '%' as a scope id (spaces, quotes, '}', $( )),
    # and every address lands in a unit, an nft file or a config: none takes a zone.
    if isinstance(address, IPv6Address) and address.scope_id is not None:
        raise ValueError(
            f"{address} has a scope id (%{address.scope_id}): give the address without a zone"
        )
    return address


# An IP address without an IPv6 zone: what every address field of the inventory takes.
PlainIP = Annotated[IPv4Address | IPv6Address, AfterValidator(_no_scope)]
OptionalPath = Annotated[Path | None, BeforeValidator(_none_if_empty)]
Port = Annotated[int, BeforeValidator(_no_bool), Field(ge=1, le=65535)]
VersionText = BeforeValidator(_version_text)

# Paths on the host that go into units and env files as they are: no quoting needed anywhere.
SAFE_HOST_PATH = r"^/[A-Za-z0-9._/-]+$"
RELEASE_PATTERN = r"^\d+\.\d+\.\d+(\.post\d+)?$"
# NVIDIA driver releases: 590.48.01, 570.26 (three-digit branch, then one or two numbers).
DRIVER_VERSION_PATTERN = r"^\d{3}\.\d+(\.\d+)?$"
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The watchdog's shortest interval: a decode check takes seconds, a restart minutes.
WATCHDOG_MIN_INTERVAL_S = 30

_nvidia = data.nvidia()
_python = data.python()
_flags_read = data.sglang_flags().versions
DriverBranch = Annotated[
    Literal[_nvidia.driver_branches],  # type: ignore[valid-type]
    BeforeValidator(_int_from_digits),
]
DcgmLevel = Annotated[
    Literal[data.dcgm().diag.levels],  # type: ignore[valid-type]
    BeforeValidator(_no_bool),
]
CudaVersion = Annotated[
    Literal[_nvidia.cuda_versions],  # type: ignore[valid-type]
    VersionText,
]


# Folders the sandboxed service cannot see (ProtectHome=yes in templates/sglang.service.j2).
HIDDEN_FROM_THE_SERVICE = ("/home", "/root", "/run/user")


# What a unit's paths may be: systemd refuses a path component over 255 bytes (NAME_MAX)
# and unit settings resolve paths up to PATH_MAX; far below both, a path stays usable.
MAX_HOST_PATH = 1024
MAX_PATH_PART = 255


def _path_fits(path: str) -> str:
    if len(path) > MAX_HOST_PATH or any(len(part) > MAX_PATH_PART for part in path.split("/")):
        raise ValueError(
            f"a path of {len(path)} characters, or with a part over {MAX_PATH_PART}: systemd "
            f"refuses such a path in a unit; at most {MAX_HOST_PATH} characters, each part "
            f"at most {MAX_PATH_PART}"
        )
    return path


def _visible_to_the_service(path: str) -> str:
    hidden = [p for p in HIDDEN_FROM_THE_SERVICE if path == p or path.startswith(p + "/")]
    if hidden:
        raise ValueError(f"{path} is under {hidden[0]}, which the sandboxed service cannot see")
    return path


def _apt_line_fits(url: HttpUrl) -> HttpUrl:
    # The URL goes on an apt source line as it is, where '#' starts a comment: the line
    # would lose its suite and apt refuse the whole list.
    if "#" in str(url):
        raise ValueError(
            "a '#' (a URL fragment, or a '#' in the login) cannot stand on an apt source line, "
            "where it starts a comment; write it as %23 inside a path, drop a fragment"
        )
    return url


def _mirror_login_fits(url: HttpUrl) -> HttpUrl:
    # Refused here as the NVIDIA repository role would refuse it
    # (pyinfra_sglang/host/mirror_login.py).
    from pyinfra_sglang.host.mirror_login import login_problem, split_login

    _, login = split_login(str(url))
    problem = login_problem(login) if login else None
    if problem:
        raise ValueError(problem)
    return url


def _not_a_system_tree(path: str) -> str:
    # The service user comes to own the cache: never a system tree
    # (pyinfra_sglang/host/cache_dir.py).
    from pyinfra_sglang.host.cache_dir import path_problem

    problem = path_problem(path)
    if problem:
        raise ValueError(problem)
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
    venv = _python.venv
    name = venv.name.format(sglang=sglang_version, python=python_version, cuda=cuda_version)
    return f"{venv.root.rstrip('/')}/{name}"


class HostConfig(BaseModel):
    """What pyinfra-sglang needs to know about one host; every field has a working default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # --- NVIDIA driver and CUDA (roles/nvidia_repo.py, nvidia_driver.py, secure_boot.py,
    # cuda_toolkit.py) ---

    nvidia_driver_source: Literal["managed", "host"] = Field(
        "managed",
        description=(
            "`managed`: the deploy installs NVIDIA's repository, the pinned driver (and "
            "Fabric Manager on NVSwitch boards) and the CUDA Toolkit. `host`: the driver, "
            "Fabric Manager and toolkits the host already runs (a provider's image, a VM's "
            "host, a runfile) are used as they are; the repository, driver and toolkit roles "
            "change nothing, and planning refuses a driver too old for the GPUs or for "
            "`cuda_version`'s builds, and a missing toolkit where flash-attn is built "
            "([hosts.md](hosts.md))."
        ),
        json_schema_extra=_allowed("managed, host"),
    )
    nvidia_driver_remove_foreign: StrictBool = Field(
        False,
        description=(
            "Managed mode on a host holding NVIDIA driver packages of the distribution's "
            "archive (Ubuntu's `nvidia-driver-580-server`, `linux-modules-nvidia-*`...) or "
            "NVIDIA modules DKMS holds for no installed package: purge them right before the "
            "driver's apt transaction (`--dry` lists them; a reboot follows). Off: such a host is "
            "refused before any change, naming what was found. A runfile driver is always "
            "refused: only its own `nvidia-uninstall` removes it."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    nvidia_driver_branch: DriverBranch = Field(  # type: ignore[valid-type]
        _nvidia.default_driver_branch,
        description="NVIDIA driver branch, locked with `nvidia-driver-pinning-<branch>`.",
        json_schema_extra=_allowed(_one_of(_nvidia.driver_branches)),
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
    nvidia_driver_update_within_branch: StrictBool = Field(
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
    nvidia_apt_mirror: (
        Annotated[HttpUrl, AfterValidator(_apt_line_fits), AfterValidator(_mirror_login_fits)]
        | None
    ) = Field(
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
        _nvidia.default_cuda_version,
        description="CUDA Toolkit release (installs `cuda-toolkit-<major>-<minor>`, no driver).",
        json_schema_extra=_allowed(_one_of(_nvidia.cuda_versions)),
    )
    # --- the SGLang server (roles/sglang_service.py) ---

    sglang_version: Annotated[str, VersionText, Field(pattern=RELEASE_PATTERN)] = Field(
        "0.5.23",
        description="SGLang release pinned in the virtualenv.",
        json_schema_extra=_allowed(
            f"a release from {_flags_read.oldest_read} to {_flags_read.newest_read} (the "
            "releases read: data/sglang_flags.toml [versions]) such as 0.5.23 or 0.5.9.post1; "
            "another only with sglang_allow_unread_release"
        ),
    )
    sglang_allow_unread_release: StrictBool = Field(
        False,
        description=(
            "Accept an `sglang_version` outside the releases read (data/sglang_flags.toml "
            "[versions]: the flag spellings, and with a router the router pins): the service "
            "is rendered with the spellings of the nearest release read and the newest "
            "router pin, unchecked against that release's parser, and validation warns. "
            "Off: such a release is refused."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    sglang_model_profile: Annotated[
        str, Field(pattern=r"^[a-z0-9][a-z0-9.-]*$", max_length=200)
    ] = Field(
        "glm-5-nvfp4",
        description="Model profile (model, quantization, backends, tuned flags) to serve.",
        json_schema_extra=_allowed("a profile name: lowercase letters, digits, '.', '-'"),
    )
    sglang_host: PlainIP = Field(
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
    # --- the model download (roles/model.py) ---

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
        Annotated[
            str,
            Field(pattern=SAFE_HOST_PATH),
            AfterValidator(_path_fits),
            AfterValidator(_visible_to_the_service),
            AfterValidator(_not_a_system_tree),
        ]
        | None
    ) = Field(
        None,
        description=(
            "Hub cache folder the model is downloaded into and served from (HF_HUB_CACHE), on "
            "a filesystem with room for it: GPU hosts' root filesystems are often small. "
            "Unset: /var/lib/sglang/huggingface/hub. Not under /home, /root or /run/user (the "
            "sandboxed service cannot see them). The service user comes to own it: never a "
            "system tree (/etc, /usr, /var... except below /var/lib/sglang) nor a shared "
            "parent itself (/srv, /opt, /data...); on the host, before any change, no "
            "symlinked component, no package's folder, and an existing folder must be the "
            "service user's or empty (no tree is re-owned)."
        ),
        json_schema_extra=_allowed(
            "a clean absolute path of letters, digits, '.', '_', '-', '/' below "
            "/var/lib/sglang or a folder of its own elsewhere (e.g. /srv/sglang-hub), outside "
            "system trees, /home, /root, /run/user; or unset"
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
    # --- the Python environment (roles/python_env.py, flash_attn.py) ---

    pypi_index_url: HttpUrl = Field(
        HttpUrl("https://pypi.org/simple"),
        description="Python package index (or a mirror of it) for uv, SGLang and flash-attn.",
        json_schema_extra=_allowed("an http(s) URL of a PEP 503 simple index"),
    )
    uv_version: Annotated[str, VersionText, Field(pattern=r"^\d+(\.\d+)+$")] = Field(
        _python.uv.version,
        description="uv release installed on the host (with pip, from `pypi_index_url`).",
        json_schema_extra=_allowed("a release number such as 0.13.9"),
    )
    python_version: Annotated[str, VersionText, Field(pattern=r"^3\.\d+$")] = Field(
        _python.venv.python,
        description=(
            "Python of the SGLang virtualenv; the host's own when it has that version, "
            "else uv installs it."
        ),
        json_schema_extra=_allowed("3.N, such as 3.12"),
    )
    venv_path: Annotated[str, Field(pattern=SAFE_HOST_PATH), AfterValidator(_path_fits)] = Field(
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
            "Index torch, torchvision and torchaudio are installed from, before SGLang and "
            "alone (never beside `pypi_index_url`); unset: PyTorch's index for `cuda_version` "
            "(e.g. https://download.pytorch.org/whl/cu130)."
        ),
        json_schema_extra=_allowed("an http(s) URL of a PEP 503 simple index, or unset"),
    )
    sglang_kernel_index_url: HttpUrl | None = Field(
        None,
        description=(
            "Index SGLang's kernel package is installed from where PyPI's is built for another "
            "CUDA major than `cuda_version` (SGLang 0.5.6 .. 0.5.10 on CUDA 13); unset: "
            "SGLang's own index for `cuda_version` (e.g. https://docs.sglang.io/whl/cu130)."
        ),
        json_schema_extra=_allowed("an http(s) URL of a PEP 503 simple index, or unset"),
    )
    flash_attn_build: StrictBool = Field(
        True,
        description=(
            "Build flash-attn (the `flash_attn` package of flash-attn 2, ~30 min from source) "
            "into the virtualenv. SGLang 0.5.5 .. 0.5.23 import it only on paths off the "
            "GLM-5 and dense profiles: the fallback of its FA3 wrapper on GPUs other than "
            "sm_80/sm_90 (vision encoders, the fa3 backend), a few models (Kimi-VL's MoonViT, "
            "MiMo-V2 ASR, remote code through transformers) and the Qwen sparse attention "
            "backend ([packages.md](packages.md#flash-attn)). Off: the role builds nothing "
            "and the audit reports it off; a flash-attn already there stays."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    flash_attn_version: Annotated[str, VersionText, Field(pattern=RELEASE_PATTERN)] = Field(
        _python.flash_attn.version,
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
        _python.flash_attn.memory_fraction,
        gt=0,
        le=0.95,
        description="Share of available memory the flash-attn build's estimated peak may use.",
        json_schema_extra=_allowed("above 0, at most 0.95"),
    )
    # --- the model profile and the server's environment (profiles.py, render.py) ---

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
    # --- a multi-node group (roles/multinode_firewall.py, sglang_service.py) ---

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
    sglang_multinode_trusted_network: StrictBool = Field(
        False,
        description=(
            "Do the multi-node group's hosts talk over a private, trusted network? SGLang's "
            "inter-node transport deserializes pickles from TCP (sglang#24618) and torch, NCCL "
            "and ZMQ listen on all interfaces: a group with a public address is refused unless "
            "this says the network between them is trusted (a VPN, a firewalled fabric)."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    sglang_multinode_firewall: StrictBool = Field(
        True,
        description=(
            "Write an nftables table on each member of the multi-node group that admits only "
            "the group's members to its rendezvous, ZMQ and NCCL ports (the rendezvous port "
            "and the pinned ephemeral range, data/multinode_firewall.toml). Needs each "
            "member's address (ssh_hostname, else its name) as an IP address."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    # --- the router and rolling restarts; metrics exposure (roles/sglang_service.py) ---

    sglang_router_worker_urls: list[HttpUrl] = Field(
        default_factory=list,
        description=(
            "Data-parallel replicas to put SGLang's router in front of; when set, this host "
            "runs the router unit too."
        ),
        json_schema_extra=_allowed("a list of http(s) URLs of SGLang servers"),
    )
    sglang_rolling_batch: Annotated[int, BeforeValidator(_no_bool)] = Field(
        1,
        ge=1,
        description=(
            "How many servers behind one router a deploy restarts at once: each waits for "
            "health before the next starts, the others keep serving. Servers behind no "
            "router restart together."
        ),
        json_schema_extra=_allowed("a whole number, 1 or more"),
    )
    sglang_router_host: PlainIP | None = Field(
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
    sglang_metrics_public: StrictBool = Field(
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
    # --- the watchdog (roles/sglang_watchdog.py) ---

    sglang_watchdog: StrictBool = Field(
        False,
        description=(
            "Run a watchdog on the host: a systemd timer asks the server the decode check's "
            "question on loopback every `sglang_watchdog_interval_s`, and restarts it (drain, "
            "health wait) after `sglang_watchdog_failures` failed checks in a row, at most "
            "`sglang_watchdog_max_restarts_per_hour` times an hour. For a server whose "
            "/health answers while generation hangs."
        ),
        json_schema_extra=_allowed("true, false; not on a member of sglang_multinode_group"),
    )
    sglang_watchdog_interval_s: Annotated[int, BeforeValidator(_no_bool)] = Field(
        300,
        ge=WATCHDOG_MIN_INTERVAL_S,
        le=86400,
        description="Seconds between two decode checks of the watchdog.",
        json_schema_extra=_allowed(f"{WATCHDOG_MIN_INTERVAL_S}..86400"),
    )
    sglang_watchdog_timeout_s: Annotated[int, BeforeValidator(_no_bool)] = Field(
        120,
        ge=5,
        le=3600,
        description=(
            "Seconds one decode check of the watchdog may take, all its requests together; "
            "longer counts as a failure (reason timeout)."
        ),
        json_schema_extra=_allowed("5..3600"),
    )
    sglang_watchdog_failures: Annotated[int, BeforeValidator(_no_bool)] = Field(
        3,
        ge=1,
        le=100,
        description=(
            "Failed decode checks in a row after which the watchdog restarts the server. A "
            "check is not counted while the server loads (a refused connection or a 503 "
            "within the profile's `start_timeout_s` of its start, before its first answer) or "
            "works (a timeout while `sglang:realtime_tokens_total` moves): so failures x "
            "interval need not cover a long model load."
        ),
        json_schema_extra=_allowed("1..100"),
    )
    sglang_watchdog_max_restarts_per_hour: Annotated[int, BeforeValidator(_no_bool)] = Field(
        2,
        ge=1,
        le=60,
        description=(
            "Restarts the watchdog makes within any hour; beyond them it restarts nothing, "
            "says so in the journal, and the audit fails `watchdog-restarts`."
        ),
        json_schema_extra=_allowed("1..60"),
    )
    # --- monitoring (roles/monitoring.py; pyinfra_sglang/monitoring/) ---

    monitoring_role: Literal["off", "server"] = Field(
        "off",
        description=(
            "`server`: this host runs Prometheus (and Grafana) scraping every SGLang server, "
            "router, node exporter and DCGM exporter of the inventory, with the alert rules "
            "of data/monitoring.toml. With one such host in the inventory, every other host "
            "runs a node exporter on `monitoring_exporter_address`. `off`: no monitoring "
            "server here (docs/monitoring.md)."
        ),
        json_schema_extra=_allowed("off, server"),
    )
    monitoring_listen_address: PlainIP = Field(
        IPv4Address("127.0.0.1"),
        description=(
            "Address Prometheus and Grafana listen on, on the monitoring host: loopback "
            "only (Prometheus has no authentication); reach them through an SSH tunnel "
            "(`ssh -L 3000:localhost:3000 host`)."
        ),
        json_schema_extra=_allowed("a loopback IP address (127.0.0.0/8, ::1)"),
    )
    monitoring_exporter_address: PlainIP | None = Field(
        None,
        description=(
            "Address this host's node exporter (and DCGM exporter, with "
            "`nvidia_dcgm_install`) listens on, for the monitoring host to scrape. Unset: "
            "127.0.0.1 on the monitoring host itself, else the host's address (ssh_hostname, "
            "else its name) when that is an IP address."
        ),
        json_schema_extra=_allowed("an IP address, or unset"),
    )
    monitoring_firewall: StrictBool = Field(
        True,
        description=(
            "With a monitoring server in the inventory, an nftables table on this host that "
            "drops new connections to the node exporter's port (and the DCGM exporter's, "
            "with `nvidia_dcgm_install`) from anywhere but loopback and the monitoring "
            "server. SGLang's /metrics shares the API port and is not filtered "
            "(docs/monitoring.md). `false`, or no monitoring server: the table is removed."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    monitoring_scrape_address: PlainIP | None = Field(
        None,
        description=(
            "On the monitoring server: the address its scrapes come from, the one the other "
            "hosts' metrics firewall admits. Unset: the server's address (ssh_hostname, else "
            "its name) when that is an IP address; set it when that is a name, or when the "
            "server reaches the other hosts from another interface."
        ),
        json_schema_extra=_allowed("an IP address, or unset"),
    )
    grafana_admin_password_file: OptionalPath = Field(
        None,
        description=(
            "File on the controller holding Grafana's admin password (one line): written "
            "root:grafana 0640 on the monitoring host, never on a command line. Needed with "
            '`monitoring_role = "server"` and `monitoring_grafana`.'
        ),
        json_schema_extra=_allowed("a path on the controller, or unset"),
    )
    monitoring_grafana: StrictBool = Field(
        True,
        description=(
            "On the monitoring host, Grafana from Grafana's apt repository with a Prometheus "
            "datasource, SGLang's dashboard for `sglang_version` and a GPU dashboard."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    monitoring_grafana_apt_url: Annotated[HttpUrl, AfterValidator(_apt_line_fits)] | None = Field(
        None,
        description=(
            "A mirror of Grafana's apt repository (suite stable, component main); unset: "
            "https://apt.grafana.com."
        ),
        json_schema_extra=_allowed("an http(s) URL, or unset"),
    )
    monitoring_grafana_key_url: HttpUrl | None = Field(
        None,
        description=(
            "Where the repository's signing key is downloaded from; unset: "
            "https://apt.grafana.com/gpg.key."
        ),
        json_schema_extra=_allowed("an http(s) URL, or unset"),
    )
    monitoring_grafana_key_fingerprint: Annotated[str, Field(pattern=r"^[0-9A-F]{40}$")] | None = (
        Field(
            None,
            description=(
                "Fingerprint of the only key taken from the downloaded key file (a mirror that "
                "signs with its own key); unset: Grafana's, pinned in data/monitoring.toml."
            ),
            json_schema_extra=_allowed("40 upper-case hex digits, or unset"),
        )
    )
    monitoring_sglang_dashboard_url: HttpUrl | None = Field(
        None,
        description=(
            "Where SGLang's Grafana dashboard is downloaded from; unset: SGLang's repository "
            "at the tag of `sglang_version` (data/monitoring.toml)."
        ),
        json_schema_extra=_allowed("an http(s) URL, or unset"),
    )
    # --- the GPUs the host should have (validation, roles/nvidia_driver.py, the audit) ---

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
    # --- A/B runs and the tuner (deploy/ab.py, deploy/tune.py) ---

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
        min_length=1,  # [] would search nothing: unset means every setting
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
    tune_keep: StrictBool = Field(
        True,
        description=(
            "Leave the host on the tuner's winner (false: back on its starting settings, the "
            "inventory's own)."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    # --- the audit (deploy/audit.py) ---

    audit_report_dir: Annotated[str, Field(min_length=1)] = Field(
        "results/audit",
        description="Folder on the controller where deploy/audit.py writes `<host>.json`.",
        json_schema_extra=_allowed("a path, relative to where pyinfra runs or absolute"),
    )
    audit_link_probe: StrictBool = Field(
        False,
        description=(
            "Should deploy/audit.py measure link bandwidth (host<->GPU, GPU<->GPU, "
            "NCCL all-reduce) with the venv's torch? Takes GPU memory and time while it runs."
        ),
        json_schema_extra=_allowed("true, false"),
    )
    nvidia_dcgm_install: StrictBool = Field(
        False,
        description=(
            "Install NVIDIA DCGM from NVIDIA's repository (roles/dcgm.py): DCGM 4's package "
            "for cuda_version's major (data/dcgm.toml) and its `nvidia-dcgm` service, enabled "
            "and running, so the audit can run `dcgmi diag`. With "
            '`nvidia_driver_source = "host"` it installs nothing.'
        ),
        json_schema_extra=_allowed("true, false"),
    )
    audit_dcgm_level: DcgmLevel = Field(
        data.dcgm().diag.default_level,
        description=(
            "Run level of `dcgmi diag -r` in deploy/audit.py where DCGM's dcgmi is on PATH "
            "(finding `dcgm-diag`): 1 takes seconds, 2 minutes, 3 about half an hour and "
            "needs the GPUs to itself. Where dcgmi is absent the audit notes it as not run."
        ),
        json_schema_extra=_allowed(", ".join(str(n) for n in data.dcgm().diag.levels)),
    )

    # --- benchmarks (deploy/bench.py) ---

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
    # --- reboots (roles/reboot.py) ---

    allow_reboot: StrictBool = Field(
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

    # --- rules across fields, and what the roles derive from them ---

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

    @property
    def uses_host_driver(self) -> bool:
        """The driver, Fabric Manager and toolkits are the host's own (nvidia_driver_source =
        "host"): the roles that install them change nothing. The one place this is asked."""
        return self.nvidia_driver_source == "host"

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
    def _grafana_needs_a_password(self) -> HostConfig:
        if (
            self.monitoring_role == "server"
            and self.monitoring_grafana
            and self.grafana_admin_password_file is None
        ):
            raise _field_error(
                "grafana_admin_password_file",
                'monitoring_role = "server" installs Grafana, whose admin password comes from '
                "this file (never admin/admin); set it, or monitoring_grafana: false",
            )
        return self

    @model_validator(mode="after")
    def _prometheus_stays_on_loopback(self) -> HostConfig:
        # Prometheus's API has no authentication unless a --web.config.file gives one, which
        # the role does not render: off loopback it would serve every scraped series and
        # take any query from whoever reaches the port.
        if self.monitoring_role == "server" and not self.monitoring_listen_address.is_loopback:
            raise _field_error(
                "monitoring_listen_address",
                f"Prometheus on {self.monitoring_listen_address} would answer anyone who "
                "reaches it, without authentication; keep it on loopback and reach Prometheus "
                "and Grafana through an SSH tunnel (ssh -L 3000:localhost:3000 "
                "-L 9090:localhost:9090 HOST), or put an authenticating proxy in front of it",
            )
        return self

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
    def _sglang_release_read(self) -> HostConfig:
        # A release no one read may spell a flag otherwise, or want another gateway: refused
        # before any change, unless the inventory accepts it (then semantic_checks warns).
        unread = unread_release(self.sglang_version, self.routed())
        if unread and not self.sglang_allow_unread_release:
            raise _field_error("sglang_version", unread.refusal())
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
    def _host_driver_is_not_installed(self) -> HostConfig:
        # The host's own driver is used as it is: settings of the driver the deploy would
        # install contradict it.
        if not self.uses_host_driver:
            return self
        for name in (
            "nvidia_driver_version",
            "nvidia_driver_update_within_branch",
            "nvidia_driver_remove_foreign",
        ):
            if getattr(self, name):
                raise _field_error(
                    name,
                    f'nvidia_driver_source = "host" uses the driver the host runs; {name} '
                    "sets up the one the deploy installs. Unset one of them",
                )
        return self

    @model_validator(mode="after")
    def _driver_runs_the_toolkit(self) -> HostConfig:
        # Below the release's own minimum, a branch on its major's floor still runs it
        # through minor-version compatibility (no JIT of newer PTX): validation warns
        # (semantic_checks). Below the floor nothing starts: refused. The host's own driver
        # is judged at planning, from what it runs.
        from pyinfra_sglang.host.nvidia import minor_version_compat_floor

        floor = minor_version_compat_floor(self.cuda_version)
        if not self.uses_host_driver and floor and self.nvidia_driver_branch < floor:
            raise _field_error(
                "nvidia_driver_branch",
                f"branch {self.nvidia_driver_branch} does not run CUDA {self.cuda_version} "
                f"programs at all (CUDA minor-version compatibility: "
                f"{self.cuda_version.split('.')[0]}.x needs branch {floor} or later). Choose "
                "a newer driver, or an older cuda_version",
            )
        return self

    @model_validator(mode="after")
    def _router_not_its_own_worker(self) -> HostConfig:
        # A worker URL that is the router's own address: every request proxied to itself.
        if not self.sglang_router_worker_urls:
            return self
        bind = self.router_bind()
        own = {(str(bind), self.sglang_router_port)}
        if bind.is_loopback or bind.is_unspecified:
            own |= {(name, self.sglang_router_port) for name in ("127.0.0.1", "::1", "localhost")}
        for url in self.sglang_router_worker_urls:
            host = (url.host or "").strip("[]")
            try:
                host = str(ip_address(host))
            except ValueError:
                pass
            if (host, url.port) in own:
                raise _field_error(
                    "sglang_router_worker_urls",
                    f"{url} is the router's own address (sglang_router_host "
                    f"{bind}, sglang_router_port {self.sglang_router_port}): it would proxy "
                    "every request to itself; name the SGLang servers' URLs",
                )
        return self

    @model_validator(mode="after")
    def _sglang_installs_for_the_cuda(self) -> HostConfig:
        # PyPI's SGLang kernel and PyTorch's builds exist for some CUDA majors only.
        from pyinfra_sglang.host.python_stack import stack_problem

        problem = stack_problem(self.sglang_version, self.cuda_version)
        if problem:
            raise _field_error("sglang_version", problem)
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
        # The tuner's settings by name, from its data file (the tuner sits above the model).
        known = list(data.tuning().settings)
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
        tuning = self.tune_settings is not None or self.tune_concurrency is not None
        if tuning and self.bench_repeat < 2:
            # What deploy/tune.py refuses (roles/tuner.py), said by validate for a host whose
            # inventory asks for a search.
            raise _field_error(
                "bench_repeat",
                f"{self.bench_repeat} with tune_settings or tune_concurrency set: one run a "
                "trial shows no spread, so deploy/tune.py cannot tell a gain from noise; "
                "allowed: 2..100 for a host that is tuned",
            )
        return self

    @model_validator(mode="after")
    def _watchdog_restarts_one_server(self) -> HostConfig:
        # A multi-node group starts, stops and rolls back as one (the deploy coordinates its
        # members from the controller); a watchdog on one member would restart it alone.
        if self.sglang_watchdog and self.sglang_multinode_group:
            raise _field_error(
                "sglang_watchdog",
                f"a member of multi-node group {self.sglang_multinode_group} restarts only "
                "with its group (the deploy's rank-0-first order); a watchdog restarts one "
                "host alone. Allowed: false for multi-node members",
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


def field_allowed(name: str) -> str:
    extra = HostConfig.model_fields[name].json_schema_extra or {}
    return str(extra.get("allowed", ""))  # type: ignore[union-attr]


def host_profile(config: HostConfig):
    """The host's model profile with its inventory overrides applied (ProfileError if bad)."""
    from pyinfra_sglang.serving.profiles import load_profile, merge_overrides

    profile = load_profile(config.sglang_model_profile, config.sglang_profile_dirs)
    return merge_overrides(profile, config.sglang_profile_overrides)


def ab_side_b(config: HostConfig) -> HostConfig:
    """The host's config with bench_ab_overrides laid over its profile overrides: what side
    B of an A/B serves."""
    overrides = {**config.sglang_profile_overrides, **config.bench_ab_overrides}
    return config.model_copy(update={"sglang_profile_overrides": overrides})
