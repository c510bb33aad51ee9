"""Inventory validation: every host of a pyinfra inventory checked against ``HostConfig``
before any host is changed, one problem per bad value, naming the host, the field, the value,
where the value came from and what is allowed. Keys that belong to pyinfra itself (connector
data such as ``ssh_user``, global arguments such as ``_sudo``) pass through; keys starting
with ``x_`` are the user's own and are not checked; any other key is an error, so a typo
cannot pass silently.

Beyond the values themselves, semantic_checks.py renders every host's service files with
the GPUs the inventory plans for (secrets read, then masked) and refuses what the renderer
would refuse, so a value that cannot work stops the run before the driver, CUDA or the
virtualenv change. It also refuses SSH settings that trust unknown host keys, and warns about
weaker ones. Secrets never reach a problem's text (masking.py).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from functools import cache
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pyinfra import logger

from pyinfra_sglang.config import USER_KEY_PREFIX, HostConfig, field_allowed
from pyinfra_sglang.inventory.masking import mask_secrets, secrets_in
from pyinfra_sglang.inventory.monitoring import inventory_errors
from pyinfra_sglang.inventory.problems import InventoryError, Problem
from pyinfra_sglang.inventory.semantic_checks import service_problems, ssh_problems

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.inventory import Inventory


@cache
def pyinfra_data_keys() -> frozenset[str]:
    """Keys pyinfra itself reads from host data: connector data and global arguments."""
    from pyinfra.api.arguments import all_global_arguments
    from pyinfra.api.connectors import get_all_connectors

    keys = {name for name, _ in all_global_arguments() if name.startswith("_")}
    for connector in get_all_connectors().values():
        keys.update(connector.data_meta)
    return frozenset(keys)


def _masked(problems: list[Problem], values: dict[str, Any]) -> list[Problem]:
    """``problems`` with no secret of ``values`` (a host's data) in their text; the values
    shown go through redact() too (credentials found by their form)."""
    from dataclasses import replace

    from pyinfra_sglang.redact import redact

    secrets = secrets_in(values)
    return [
        replace(
            problem,
            value=_env_names_only(problem, values) or mask_secrets(redact(problem.value), secrets),
            message=mask_secrets(problem.message, secrets),
            allowed=mask_secrets(problem.allowed, secrets),
        )
        for problem in problems
    ]


def _env_names_only(problem: Problem, values: dict[str, Any]) -> str | None:
    """sglang_env shown by its names alone: users keep tokens there under any name (issue 35
    N10), so its values are never echoed."""
    env = values.get("sglang_env")
    if problem.field != "sglang_env" or not isinstance(env, dict):
        return None
    from pyinfra_sglang.redact import mask_text

    return repr({str(name): mask_text() for name in env})


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
    problems += _address_problems(host, values, source_of)
    try:
        config = HostConfig(**ours)
    except ValidationError as error:
        problems += [_validation_problem(host, item, ours, source_of) for item in error.errors()]
        return None, problems
    return (None if problems else config), problems


# A host's inventory name: RFC 1123 labels (letters, digits, hyphens; dots between; '_' too,
# which pyinfra aliases often hold), an IP address without a zone, or one of pyinfra's
# connector names (@local, @docker/ID, ...). The name reaches the metrics firewall's nft
# file, the node and DCGM exporters' units and Prometheus's targets as it is.
_HOST_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")
_CONNECTOR_NAME = re.compile(r"@[a-z]+(?:/[A-Za-z0-9._:@/-]+)?")
# A Linux interface name, as an IPv6 zone may give it (IFNAMSIZ: at most 15 characters).
_INTERFACE = re.compile(r"[A-Za-z0-9_.-]{1,15}")


def _address_problems(
    host: str, values: dict[str, Any], source_of: dict[str, str]
) -> list[Problem]:
    """pyinfra's ssh_hostname, which multi-node groups and monitoring also render as an
    address: a host name or an IP address, whose IPv6 zone (a link-local address needs one
    to be reached) is an interface name. Named here, not as the file it would break."""
    address = values.get("ssh_hostname")
    if address is None or (isinstance(address, str) and _names_a_host(address, zone_allowed=True)):
        return []
    return [
        Problem(
            host=host,
            field="ssh_hostname",
            value=repr(address),
            source=source_of.get("ssh_hostname", "host data"),
            message="not a host name or address",
            allowed=(
                "a host name (letters, digits, '-', '_', dot-separated labels) or an IP "
                "address; an IPv6 zone only as an interface name (fe80::1%eth0)"
            ),
        )
    ]


def _names_a_host(text: str, zone_allowed: bool) -> bool:
    """Is ``text`` a DNS name or an IP address (its IPv6 zone, where allowed, an interface
    name)?"""
    if len(text) <= 253 and _HOST_NAME.fullmatch(text):
        return True
    try:
        address = ip_address(text)
    except ValueError:
        return False
    zone = getattr(address, "scope_id", None)
    return zone is None or (zone_allowed and _INTERFACE.fullmatch(zone) is not None)


def host_name_problem(name: str) -> Problem | None:
    """Why ``name`` cannot name a host here, or None. Checked before anything else: a name
    holding a newline or a quote would add lines to files the hosts load as root."""
    if _names_a_host(name, zone_allowed=False) or _CONNECTOR_NAME.fullmatch(name):
        return None
    return Problem(
        host=repr(name),
        field="host name",
        value=repr(name),
        source="inventory",
        message="not a host name, IP address or pyinfra connector",
        allowed=(
            "a DNS name of letters, digits, '-' and '_' in dot-separated labels of 1-63, at "
            "most 253 in all; an IP address without a %zone; or @local, @docker/ID and the "
            "like; an alias of another form: name the host by that and set ssh_hostname"
        ),
    )


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
    from pyinfra_sglang.data import DataError

    # A data file of the checkout that a rule read is broken: no field of the host's is to
    # blame (it was reported under sglang_host); the file is named instead.
    cause = (item.get("ctx") or {}).get("error")
    if isinstance(cause, DataError):
        raise cause
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


def validate_inventory(
    inventory: Inventory, warn: Callable[[str], None] | None = None
) -> dict[str, HostConfig]:
    """Validate every host of ``inventory``; raise InventoryError listing all problems.
    Warnings (weaker SSH settings, readable secret files) go to ``warn``, by default
    pyinfra's logger."""
    warn = warn or logger.warning
    configs: dict[str, HostConfig] = {}
    problems: list[Problem] = []
    sources_of: dict[str, dict[str, str]] = {}
    for host in inventory:
        named = host_name_problem(host.name)
        if named is not None:
            problems.append(named)
            continue
        values, sources = _host_values_and_sources(host)
        sources_of[host.name] = sources
        config, host_problems = validate_host_data(host.name, values, sources)
        host_problems += ssh_problems(host, values, sources, warn)
        if config is not None:
            host_problems += service_problems(host, config, sources, warn)
        host_problems = _masked(host_problems, values)
        problems += host_problems
        if config is not None and not host_problems:
            configs[host.name] = config
    # Monitoring spans hosts: planned once every host's own values are good.
    if not problems:
        problems += _monitoring_problems(inventory, configs, sources_of)
    if problems:
        raise InventoryError(problems)
    return configs


def _monitoring_problems(
    inventory: Inventory, configs: dict[str, HostConfig], sources_of: dict[str, dict[str, str]]
) -> list[Problem]:
    """What roles/monitoring.py would refuse when it plans (two monitoring servers, an
    address the server cannot reach), as problems before any host changes."""
    return [
        Problem(
            host=error.host,
            field=error.field,
            value=error.value,
            source=sources_of.get(error.host, {}).get(error.field, "default"),
            message=error.reason,
            allowed=error.allowed,
        )
        for error in inventory_errors(inventory, configs)
    ]
