"""The inventory model: every value pyinfra-sglang reads from host and group data.

One pydantic class, ``HostConfig``, holds the fields with their defaults. ``validate_inventory``
checks every host of a pyinfra inventory against it before any host is changed and reports
one problem per bad value, naming the host, the field, the value, where the value came from
and what is allowed. Keys that belong to pyinfra itself (connector data such as ``ssh_user``,
global arguments such as ``_sudo``) pass through; keys starting with ``x_`` are the user's own
and are not checked; any other key is an error, so a typo cannot pass silently.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    HttpUrl,
    ValidationError,
    model_validator,
)
from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.inventory import Inventory

USER_KEY_PREFIX = "x_"


def _int_from_digits(value: Any) -> Any:
    # "590" from a Python inventory means the branch 590.
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


def _str_from_number(value: Any) -> Any:
    # pyinfra's --data turns "13.1" into the float 13.1: a version number is still meant.
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _none_if_empty(value: Any) -> Any:
    # An empty path (`--data hf_token_file=`) means "unset", not the current directory.
    return None if isinstance(value, str) and not value.strip() else value


OptionalPath = Annotated[Path | None, BeforeValidator(_none_if_empty)]

_nvidia = data.load("nvidia")
_python = data.load("python")
DriverBranch = Annotated[
    Literal[tuple(_nvidia["driver_branches"])],  # type: ignore[valid-type]
    BeforeValidator(_int_from_digits),
]
CudaVersion = Annotated[
    Literal[tuple(_nvidia["cuda_versions"])],  # type: ignore[valid-type]
    BeforeValidator(_str_from_number),
]


def _allowed(text: str) -> dict[str, str]:
    return {"allowed": text}


def _one_of(values) -> str:
    return ", ".join(str(v) for v in values)


class HostConfig(BaseModel):
    """What pyinfra-sglang needs to know about one host; every field has a working default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nvidia_driver_branch: DriverBranch = Field(  # type: ignore[valid-type]
        _nvidia["default_driver_branch"],
        description="NVIDIA driver branch, locked with `nvidia-driver-pinning-<branch>`.",
        json_schema_extra=_allowed(_one_of(_nvidia["driver_branches"])),
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
    cuda_version: CudaVersion = Field(  # type: ignore[valid-type]
        _nvidia["default_cuda_version"],
        description="CUDA Toolkit release (installs `cuda-toolkit-<major>-<minor>`, no driver).",
        json_schema_extra=_allowed(_one_of(_nvidia["cuda_versions"])),
    )
    sglang_version: Annotated[
        str, BeforeValidator(_str_from_number), Field(pattern=r"^\d+\.\d+\.\d+(\.post\d+)?$")
    ] = Field(
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
    sglang_port: int = Field(
        30000,
        ge=1,
        le=65535,
        description="TCP port of the SGLang server.",
        json_schema_extra=_allowed("1..65535"),
    )
    sglang_api_key_file: OptionalPath = Field(
        None,
        description="File on the controller holding the API key (written 0600 on the host).",
        json_schema_extra=_allowed("a path on the controller, or unset"),
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
    uv_version: Annotated[
        str, BeforeValidator(_str_from_number), Field(pattern=r"^\d+(\.\d+)+$")
    ] = Field(
        _python["uv"]["version"],
        description="uv release installed on the host (with pip, from `pypi_index_url`).",
        json_schema_extra=_allowed("a release number such as 0.13.9"),
    )
    python_version: Annotated[
        str, BeforeValidator(_str_from_number), Field(pattern=r"^3\.\d+$")
    ] = Field(
        _python["venv"]["python"],
        description=(
            "Python of the SGLang virtualenv; the host's own when it has that version, "
            "else uv installs it."
        ),
        json_schema_extra=_allowed("3.N, such as 3.12"),
    )
    venv_path: Annotated[str, Field(pattern=r"^/[^\s]*$")] = Field(
        _python["venv"]["path"],
        description="Where the SGLang virtualenv lives on the host.",
        json_schema_extra=_allowed("an absolute path"),
    )
    torch_index_url: HttpUrl | None = Field(
        None,
        description=(
            "Index torch is installed from; unset: PyTorch's index for `cuda_version` "
            "(e.g. https://download.pytorch.org/whl/cu130)."
        ),
        json_schema_extra=_allowed("an http(s) URL of a PEP 503 simple index, or unset"),
    )
    flash_attn_version: Annotated[
        str, BeforeValidator(_str_from_number), Field(pattern=r"^\d+\.\d+\.\d+(\.post\d+)?$")
    ] = Field(
        _python["flash_attn"]["version"],
        description="flash-attn release built from source into the virtualenv.",
        json_schema_extra=_allowed("a release number such as 2.8.3"),
    )
    flash_attn_cuda_archs: list[Annotated[str, Field(pattern=r"^\d{2,3}a?$")]] | None = Field(
        None,
        description=(
            "CUDA architectures flash-attn is built for; unset: those of the GPUs found "
            "(compute capability 9.0 -> 90)."
        ),
        json_schema_extra=_allowed('a list such as ["90"] or ["120"], or unset'),
    )
    flash_attn_memory_fraction: float = Field(
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
    sglang_multinode_group: str | None = Field(
        None,
        description=(
            "Inventory group whose hosts serve one model together (`--nnodes`; ranks in the "
            "group's order; the first host is the rendezvous)."
        ),
        json_schema_extra=_allowed("the name of a group this host is in, or unset"),
    )
    sglang_dist_init_port: int = Field(
        50000,
        ge=1,
        le=65535,
        description="Port of the multi-node rendezvous on the group's first host.",
        json_schema_extra=_allowed("1..65535"),
    )
    sglang_router_worker_urls: list[HttpUrl] = Field(
        default_factory=list,
        description=(
            "Data-parallel replicas to put SGLang's router in front of; when set, this host "
            "runs the router unit too."
        ),
        json_schema_extra=_allowed("a list of http(s) URLs of SGLang servers"),
    )
    sglang_router_port: int = Field(
        30080,
        ge=1,
        le=65535,
        description="TCP port of the router, on `sglang_host`.",
        json_schema_extra=_allowed("1..65535"),
    )
    expected_gpu_count: int | None = Field(
        None,
        ge=1,
        le=64,
        description="GPUs the host should have; the audit reports a mismatch.",
        json_schema_extra=_allowed("1..64, or unset to take what is found"),
    )
    bench_ab_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Profile settings side B of deploy/ab.py serves with (side A: the inventory's own), "
            'e.g. `{"cuda_graph": false}` (CUDA graphs off).'
        ),
        json_schema_extra=_allowed("profile fields, as in sglang_profile_overrides"),
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
        list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1)
    ] = Field(
        default_factory=lambda: [1, 8, 32],
        description=(
            "Concurrent requests deploy/bench.py measures, one benchmark each "
            "(`--max-concurrency`)."
        ),
        json_schema_extra=_allowed("a non-empty list of 1..4096, such as [1, 8, 32]"),
    )
    bench_input_len: int = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Prompt tokens of every benchmark request (`--random-input-len`).",
        json_schema_extra=_allowed("1..1000000"),
    )
    bench_output_len: int = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Generated tokens of every benchmark request (`--random-output-len`).",
        json_schema_extra=_allowed("1..1000000"),
    )
    bench_prompts_per_concurrency: int = Field(
        4,
        ge=1,
        le=1000,
        description=(
            "Requests per benchmark as a multiple of its concurrency (4: 32 requests at "
            "concurrency 8), at least 8."
        ),
        json_schema_extra=_allowed("1..1000"),
    )
    bench_repeat: int = Field(
        1,
        ge=1,
        le=100,
        description="Times each concurrency is measured in one run (for the spread A/B compares).",
        json_schema_extra=_allowed("1..100"),
    )
    bench_regression_pct: float = Field(
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

    @model_validator(mode="after")
    def _public_bind_needs_api_key(self) -> HostConfig:
        if not self.sglang_host.is_loopback and self.sglang_api_key_file is None:
            raise ValueError(
                f"binding to {self.sglang_host} (not loopback) without an API key; "
                "set sglang_api_key_file or bind to 127.0.0.1"
            )
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


def validate_host_data(
    host: str, values: dict[str, Any], source_of: dict[str, str] | None = None
) -> tuple[HostConfig | None, list[Problem]]:
    """Validate one host's data; return its config (None when invalid) and the problems."""
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
    # Model-level rules (loc == ()) are about the bind address: report them on that field.
    name = str(item["loc"][0]) if item["loc"] else "sglang_host"
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


def _service_problems(
    host: str, config: HostConfig, groups: list[str], source_of: dict[str, str]
) -> list[Problem]:
    """What the SGLang service would refuse, found before any host changes: the profile,
    its overrides, and the flags the pinned SGLang release has."""
    from pyinfra_sglang.render import server_args

    def problem(field: str, message: str, allowed: str) -> Problem:
        value = getattr(config, field)
        return Problem(host, field, repr(value), source_of.get(field, "default"), message, allowed)

    problems = []
    if config.sglang_multinode_group and config.sglang_multinode_group not in groups:
        problems.append(
            problem(
                "sglang_multinode_group",
                f"this host is not in group {config.sglang_multinode_group}",
                f"one of this host's groups: {', '.join(groups)}",
            )
        )
    try:
        profile = host_profile(config)
    except PyinfraError as error:
        field = (
            "sglang_profile_overrides"
            if config.sglang_profile_overrides
            else "sglang_model_profile"
        )
        return problems + [problem(field, str(error), field_allowed(field))]
    try:
        server_args(
            profile,
            config.sglang_version,
            1,
            str(config.sglang_host),
            config.sglang_port,
            "/etc/sglang/sglang.yaml",
        )
    except PyinfraError as error:
        problems.append(problem("sglang_version", str(error), field_allowed("sglang_version")))
    if config.bench_ab_overrides:
        try:
            server_args(
                host_profile(ab_side_b(config)),
                config.sglang_version,
                1,
                str(config.sglang_host),
                config.sglang_port,
                "/etc/sglang/sglang.yaml",
            )
        except PyinfraError as error:
            problems.append(
                problem("bench_ab_overrides", str(error), field_allowed("bench_ab_overrides"))
            )
    return problems


def ab_side_b(config: HostConfig) -> HostConfig:
    """The host's config with bench_ab_overrides laid over its profile overrides: what side
    B of an A/B serves."""
    overrides = {**config.sglang_profile_overrides, **config.bench_ab_overrides}
    return config.model_copy(update={"sglang_profile_overrides": overrides})


def validate_inventory(inventory: Inventory) -> dict[str, HostConfig]:
    """Validate every host of ``inventory``; raise InventoryError listing all problems."""
    configs: dict[str, HostConfig] = {}
    problems: list[Problem] = []
    for host in inventory:
        values, sources = _host_values_and_sources(host)
        config, host_problems = validate_host_data(host.name, values, sources)
        problems += host_problems
        if config is not None:
            host_problems = _service_problems(host.name, config, list(host.groups), sources)
            problems += host_problems
            if not host_problems:
                configs[host.name] = config
    if problems:
        raise InventoryError(problems)
    return configs


# Validated once per inventory object: the deploy file runs once per host.
_validated: dict[int, dict[str, HostConfig]] = {}


def host_config(host: Host) -> HostConfig:
    """The validated config of ``host``; validates the whole inventory on first use."""
    key = id(host.inventory)
    if key not in _validated:
        _validated[key] = validate_inventory(host.inventory)
    return _validated[key][host.name]


def load_inventory_file(path: str, override_data: dict[str, Any] | None = None) -> Inventory:
    """Load an inventory the way the pyinfra CLI does, without connecting to any host."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    # pyinfra caches compiled files by the name given: make it absolute, so two inventories
    # called inv.py in two folders stay two.
    if Path(path).exists():
        path = str(Path(path).resolve())
    # pyinfra executes inventory files inside a State context.
    with ctx_state.use(State()):
        return make_inventory(path, override_data=override_data or {}, cwd=str(Path.cwd()))


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
