"""What the SGLang service, the driver, Secure Boot, the network and SSH would refuse, found
from the inventory before any host changes: the multi-node group, the profile and its
overrides, the secret files, the service's files rendered whole (masked) for the GPUs the
inventory plans for, the MOK pair, control planes open to the world, the multi-node firewall
and host-key checking.

This module sits above render.py and service_files.py (it renders); they import the model
only, never this module. They are imported inside the functions: service_files imports the
model, and that runs this package's __init__, which imports this module, before
service_files is complete (tests/build/check_imports.py imports each module alone to
catch that); render and the rest are deferred so that importing the inventory stays as
quick as before (the CLI's start-up).
"""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Address, IPv6Address, ip_address
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang.access.known_hosts import how_to_add, known_host_gap
from pyinfra_sglang.config import HostConfig, ab_side_b, field_allowed
from pyinfra_sglang.config.releases_read import unread_release
from pyinfra_sglang.driver.nvidia import TOOLKIT_SOURCE, driver_below_toolkit, driver_mismatches
from pyinfra_sglang.driver.secure_boot import (
    MokFileError,
    key_readable_by_others,
    read_mok_pair,
)
from pyinfra_sglang.gpus import gpu_by_name
from pyinfra_sglang.inventory.groups import member_address, node_position_in
from pyinfra_sglang.inventory.problems import Problem
from pyinfra_sglang.model_files.model_snapshot import is_local_model
from pyinfra_sglang.network.multinode_firewall import filtered_ports, port_in_filtered_ranges
from pyinfra_sglang.serving.host_profile import host_profile
from pyinfra_sglang.serving.model_sizing import ModelSizeError, needs_sizing, read_model
from pyinfra_sglang.serving.placement import GpuFitError, TensorParallelError
from pyinfra_sglang.serving.profiles import load_profile
from pyinfra_sglang.serving.secret_files import SECRET_FIELDS, SecretFileError, read_secret
from pyinfra_sglang.serving.service_files import (
    planned_gpu,
    planned_service_files,
)
from pyinfra_sglang.serving.sglang_flags import FlagVersionError

if TYPE_CHECKING:
    from pyinfra.api.host import Host


def _profile_field(config: HostConfig) -> str:
    return "sglang_profile_overrides" if config.sglang_profile_overrides else "sglang_model_profile"


def _render_problem(config: HostConfig, error: PyinfraError) -> tuple[str, str]:
    """The field a render refusal is about, and its message."""
    from pyinfra_sglang.serving.render import RenderError

    planned = f"(GPUs planned: {_planned_gpus_text(config)})"
    if isinstance(error, TensorParallelError) and error.from_profile:
        return _profile_field(config), f"{error} {planned}"
    if isinstance(error, GpuFitError):
        if _expected_model_off_profile(config):
            return "expected_gpu_model", f"{error} {planned}"
        # What the inventory changed decides the blame: a pinned tp_size or another model
        # (its size) in the overrides, else the GPUs it expects.
        overridden = {"tp_size", "model"} & set(config.sglang_profile_overrides)
        field = (
            "expected_gpu_count"
            if config.expected_gpu_count and not overridden
            else _profile_field(config)
        )
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


def service_problems(
    host: Host, config: HostConfig, source_of: dict[str, str], warn: Callable[[str], None]
) -> list[Problem]:
    """What the SGLang service would refuse, found before any host changes: the multi-node
    group, the profile and its overrides, the secret files, and the service's files rendered
    whole (masked) for the GPUs the inventory plans for: the flags of the pinned release, the
    fit, anything that cannot go into a unit, env or config file. Side B of an A/B too."""

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
    _warn_unread_release(host, config, source_of, warn)
    _warn_minor_version_compat(host, config, warn)
    unsized = _model_override_problems(host, config, problem, warn)
    if unsized:
        return problems + unsized  # the render would plan for the profile's own model
    problems += _mok_problems(host, config, problem, warn)
    problems += _driver_problems(config, problem)
    problems += _exposure_problems(host, config, problem)
    node = node_position_in(config, host)
    sides = [("", config)]
    if config.bench_ab_overrides:
        sides.append(("bench_ab_overrides", ab_side_b(config)))
    for side_field, side in sides:
        try:
            planned_service_files(side, node, host_profile(side))
        except PyinfraError as error:
            field, message = _render_problem(side, error)
            problems.append(problem(side_field or field, message))
    # A router with no release pinned for the SGLang release is refused by the render above
    # (service_files reads the pin to spell the gateway's command line).
    return problems


def _model_override_problems(
    host: Host, config: HostConfig, problem: Callable[..., Problem], warn: Callable[[str], None]
) -> list[Problem]:
    """An override of ``model`` without its size: the size is read from the model's own
    files (serving/model_sizing.py); where they cannot be read, refused for a Hub model,
    naming the fields to give and the ways to let them be read; warned for a folder on the
    host (it may hold the profile's own model, copied for an air-gapped site)."""
    overrides = config.sglang_profile_overrides
    try:
        profile = load_profile(config.sglang_model_profile, config.sglang_profile_dirs)
    except PyinfraError:
        return []  # the profile's own problem is reported with the render
    if not needs_sizing(profile, overrides):
        return []
    model = str(overrides["model"])
    try:
        read_model(config, model)
    except ModelSizeError as error:
        if is_local_model(model):
            warn(
                f"warning: host {host.name}: sglang_profile_overrides: {error}. The deploy "
                "sizes it from the host's config.json and judges its fit on the GPUs found "
                "before anything changes; validate and render plan for the profile's model "
                f"({profile.model}) until then"
            )
            return []
        return [problem("sglang_profile_overrides", str(error))]
    return []


def _warn_minor_version_compat(host: Host, config: HostConfig, warn: Callable[[str], None]) -> None:
    """A driver branch (or locked release) older than the toolkit's newest update needs:
    planned on, through minor-version compatibility and its limits, and said so."""

    if config.uses_host_driver:
        return
    why = driver_below_toolkit(
        config.cuda_version, config.nvidia_driver_branch, config.nvidia_driver_version
    )
    if why:
        warn(
            f"warning: host {host.name}: cuda_version {config.cuda_version}: {why} "
            f"({TOOLKIT_SOURCE}); it runs CUDA {config.cuda_version} programs through "
            "minor-version compatibility, without JIT compilation of newer PTX (which "
            "Triton and FlashInfer kernels use). A newer nvidia_driver_branch runs it fully"
        )


def _warn_unread_release(
    host: Host, config: HostConfig, source_of: dict[str, str], warn: Callable[[str], None]
) -> None:
    """A release outside the ones read, accepted by sglang_allow_unread_release (the model
    refuses it otherwise): said once per host, since nothing checked its flags."""

    unread = unread_release(config.sglang_version, config.routed())
    if unread:
        source = source_of.get("sglang_version", "default")
        warn(
            f"warning: host {host.name}: sglang_version = {config.sglang_version!r} (from "
            f"{source}): {unread.warning()}"
        )


def _driver_problems(config: HostConfig, problem: Callable[..., Problem]) -> list[Problem]:
    """A driver branch or kernel module flavor that can run none of the GPU architectures the
    profile runs on (proprietary modules for a Blackwell-only profile): the driver would
    install and find no GPU. GPUs a host reports are checked again by the driver role."""

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


def ssh_problems(
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
    else:
        _warn_unknown_host_key(host, values, source_of, value, warn)
    return []


def _warn_unknown_host_key(
    host: Host, values: dict[str, Any], source_of: dict[str, str], strict: str, warn
) -> None:
    """With checking on (yes, ask), a host whose key the inventory's known_hosts file lacks
    is refused by pyinfra at connect ("No hosts remaining"): said now, with how to add the
    key. Without ssh_known_hosts_file, what pyinfra reads (~/.ssh/known_hosts, the system's,
    ~/.ssh/config's files) is not judged here."""

    path = values.get("ssh_known_hosts_file")
    if not path:
        return
    address = str(values.get("ssh_hostname") or host.name)
    port = values.get("ssh_port") or 22
    if not isinstance(port, int) or isinstance(port, bool):
        return  # pyinfra refuses such a port itself
    gap = known_host_gap(Path(str(path)).expanduser(), address, port)
    if gap is None:
        return
    source = source_of.get("ssh_known_hosts_file", "pyinfra's default")
    warn(
        f"warning: host {host.name}: ssh_known_hosts_file = {str(path)!r} (from {source}): "
        f"{gap}; with ssh_strict_host_key_checking = {strict!r} pyinfra will not connect "
        f"to {address}. To add its key: {how_to_add(address, port, path)}"
    )
