"""Issue 46: every value is escaped for the file it lands in.

Each text-typed field of the inventory (``HostConfig``: strings, paths, URLs, IP addresses,
literals, mappings and lists of strings) gets a corpus of hostile texts (newline, CR, NUL, tab,
NEL, U+2028, quotes, backslashes, ``$( )``, ``$VAR``, backquotes, ``;``, braces, ``%``, ``#``,
``[Section]``, ``--flag``, ``a: b``, a 20,000-character string), each carried by the field on
an otherwise valid host (a URL carries it in its path, its password and its query; a mapping
in a key or a value) whose benign value of the same carrier validates.

A value the inventory refuses (validate_host_data, then validate_inventory on a written
inventory file, with a monitoring server) passes; validation raising instead is a failure. A
value it accepts is rendered into every file the roles would write for the host, and the
commands they would run: the SGLang service, its env and config files, the router, side B of an
A/B, the watchdog, the multi-node firewall, the monitoring server's files with the host among
its targets and the host's exporters and metrics firewall, Grafana's apt source and downloads,
the model download, the Python stack's installs, NVIDIA's apt source, apt's and curl's logins.
Each is read as its reader reads it:

- systemd units and drop-ins: sections, keys, continuation lines, the words of each Exec line
  (quotes, escapes, specifiers, a lone ';', a whole-word ``$VAR``), ``systemd-analyze
  verify`` where it works here;
- EnvironmentFile= files (and Debian's defaults files): systemd's state machine
  (src/basic/env-file.c), the words of a variable a unit splits ($ARGS, the router's URLs);
- YAML: PyYAML's keys; the Prometheus config with ``promtool check config`` where installed;
- nftables files: the rule lines, comments stripped; ``nft -c -f`` where it works here;
- shell commands: ``bash -n`` and shlex's words (a here-document's first line);
- apt one-line sources: '#' outside [...] starts a comment, then the words; ``apt-get
  indextargets`` where installed; apt's auth.conf and curl's netrc as each reads its tokens
  (curl 7.88 reads a token starting with '#' as a comment: ``password #secret`` sends none).

Every structure (sections and keys, variables, YAML keys, rule lines, words) and what the tools
say must be the benign value's; where the text lands whole (an env value, an Exec word), the
reader must get it back whole. Accepted values that break a file are listed in KNOWN_BUGS
(strict expected failures).

No INI file is rendered: Grafana is configured through its drop-in's Environment= lines, read
as a systemd unit here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import typing
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import yaml
from pydantic import HttpUrl
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api import connectors as pyinfra_connectors
from pyinfra.api import inventory as pyinfra_inventory
from pyinfra.api.util import get_template
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Command

from pyinfra_sglang import data
from pyinfra_sglang.config import ab_side_b
from pyinfra_sglang.driver.mirror_login import split_login
from pyinfra_sglang.inventory import (
    HostConfig,
    InventoryError,
    load_inventory_file,
    validate_host_data,
    validate_inventory,
)
from pyinfra_sglang.model_files.model_snapshot import (
    DEFAULT_ENDPOINT,
    hub_cache_dir,
    is_local_model,
)
from pyinfra_sglang.monitoring import render as monitoring
from pyinfra_sglang.monitoring.firewall import metrics_firewall_plan
from pyinfra_sglang.monitoring.targets import JOB_DCGM, InventoryHost, monitoring_plan
from pyinfra_sglang.network.multinode_firewall import firewall_plan
from pyinfra_sglang.paths import template
from pyinfra_sglang.python_env.python_stack import install_plan
from pyinfra_sglang.serving import profiles
from pyinfra_sglang.serving.host_profile import host_profile
from pyinfra_sglang.serving.placement import NodePosition
from pyinfra_sglang.serving.service_files import node_position, planned_service_files
from pyinfra_sglang.serving.watchdog import unit_files
from roles import nvidia_repo
from roles.model import download_command, download_env, prepare_command
from roles.monitoring import grafana_keyring, sglang_dashboard_installed
from roles.nvidia_repo import apt_login_text, keyring_installed, mirror_login, nvidia_repo_url
from roles.python_env import index_options, uv_pip_install, uv_prefix
from tests.unit.ophelper import run_operation

# --- the hostile texts ---------------------------------------------------------------------

HOSTILE = {
    "newline": "a\nb",
    "carriage-return": "a\rb",
    "nul": "a\x00b",
    "tab": "a\tb",
    "next-line": "a\x85b",
    "line-separator": "a\u2028b",
    "single-quote": "it's",
    "double-quote": 'say "hi"',
    "backslash": "a\\b",
    "trailing-backslash": "a\\",
    "command-substitution": "$(touch /tmp/pwned)",
    "variable": "$PATH",
    "braced-variable": "${HOME}",
    "backquotes": "`id`",
    "semicolon": "a; reboot",
    "lone-semicolon": ";",
    "braces": "}{",
    "percent": "%n%h%%",
    "encoded-hash": "%23a",
    "hash": "a #b",
    "leading-hash": "#a",
    "section": "[Service]",
    "flag": "--flag",
    "flag-value": "--host=0.0.0.0",
    "yaml-key": "a: b",
    "space": "a b",
    "long": "x" * 20_000,
}
BENIGN = "benign"

# --- the hosts -----------------------------------------------------------------------------

CASE_NAME, CASE_ADDRESS = "gpu-1", "10.0.0.11"
PEER_NAME, PEER_ADDRESS = "gpu-2", "10.0.0.12"
MON_NAME, MON_ADDRESS = "mon", "10.0.0.5"
WORKERS = ("http://10.0.0.11:30000", "http://10.0.0.12:30000")
SSH_YES = {"ssh_strict_host_key_checking": "yes"}

# Secret files on the controller, relative to the working folder; path fields' values too.
SECRET_FIELDS = {
    "sglang_api_key_file": b"k" * 32 + b"\n",
    "hf_token_file": b"hf_" + b"t" * 32 + b"\n",
    "sglang_router_api_key_file": b"r" * 32 + b"\n",
    "grafana_admin_password_file": b"p" * 32 + b"\n",
    "nvidia_mok_key_file": b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
    "nvidia_mok_cert_file": b"\x30\x82\x01\x0a" + b"\x00" * 16,
}

# A GPU host with everything that renders a file of its own: served on the LAN with its key
# and /metrics open to the monitoring host, a router with its key, the watchdog, DCGM, a
# MOK pair, the Hub token, a variable of its own.
BASE: dict[str, Any] = {
    **SSH_YES,
    "ssh_hostname": CASE_ADDRESS,
    "sglang_host": "0.0.0.0",
    "sglang_metrics_public": True,
    "sglang_router_worker_urls": list(WORKERS),
    "sglang_watchdog": True,
    "nvidia_dcgm_install": True,
    "sglang_env": {"MY_VAR": "x"},
    **{field: f"secrets/base/{field}" for field in SECRET_FIELDS},
}
# A member of a two-node group (no watchdog: a group restarts as one).
MULTINODE_BASE = {
    **{k: v for k, v in BASE.items() if k != "sglang_watchdog"},
    "sglang_multinode_group": "pair",
}
# Fields judged on a member of a two-host group (the group's own and what only a member reads).
MULTINODE_FIELDS = ("sglang_multinode_group", "sglang_multinode_interface")
MON_VALUES = {
    **SSH_YES,
    "ssh_hostname": MON_ADDRESS,
    "monitoring_role": "server",
    "grafana_admin_password_file": "secrets/base/grafana_admin_password_file",
}


# --- the carriers: how a hostile text becomes a field's value --------------------------------


@dataclass(frozen=True)
class Carrier:
    field: str
    name: str
    build: Callable[[str], Any]
    benign: str = BENIGN  # the text of the baseline, which must validate
    extra: tuple[tuple[str, Any], ...] = ()  # other values the field needs beside it
    # Where the text lands whole (an env file's value, an Exec word), after this prefix.
    lands: str | None = None

    @property
    def id(self) -> str:
        return f"{self.field}.{self.name}"


def _raw(text: str) -> str:
    return text


def _after(prefix: str) -> Callable[[str], str]:
    return lambda text: prefix + text


def _default(field: str) -> str:
    return str(HostConfig.model_fields[field].default)


def _url_carriers(
    field: str,
    base: str = "https://mirror.example/simple",
    wrap: Callable = _raw,
    extra: tuple[tuple[str, Any], ...] = (),
) -> list[Carrier]:
    """The text in the URL's path, in its password, in its query."""
    scheme, rest = base.split("://", 1)
    return [
        Carrier(field, "url-path", lambda text: wrap(f"{base}/{text}"), extra=extra),
        Carrier(
            field, "url-password", lambda text: wrap(f"{scheme}://user:{text}@{rest}"), extra=extra
        ),
        Carrier(field, "url-query", lambda text: wrap(f"{base}?q={text}"), extra=extra),
    ]


def _path_carrier(field: str, benign: str) -> Carrier:
    """A secret file's name, in a folder of the field's own (the file made with content the
    field's reader takes)."""
    return Carrier(field, "path", _after(f"secrets/{field}/"), benign)


def _ip_carriers(field: str, benign: str) -> list[Carrier]:
    return [
        Carrier(field, "ip", _raw, benign),
        Carrier(field, "ip-suffix", _after("10.0.0.21"), ""),
        Carrier(field, "ipv6-zone", lambda text: "fe80::21" + (f"%{text}" if text else ""), ""),
    ]


# Another model in an override comes with its size (validation refuses one that keeps the
# profile's): the default profile's own here, so the service is planned as before.
_DEFAULT_PROFILE = profiles.load_profile(HostConfig().sglang_model_profile)
MODEL_SIZE = {
    "weights_gb": _DEFAULT_PROFILE.weights_gb,
    "num_layers": _DEFAULT_PROFILE.num_layers,
    "kv_bytes_per_token": dict(_DEFAULT_PROFILE.kv_bytes_per_token),
}


def _overrides(field: str, names: tuple[str, ...]) -> list[Carrier]:
    carriers = {
        "model": Carrier(field, "model", lambda text: {"model": text, **MODEL_SIZE}, lands=""),
        "org-model": Carrier(
            field, "org-model", lambda t: {"model": f"org/{t}", **MODEL_SIZE}, lands="org/"
        ),
        "local-model": Carrier(
            field, "local-model", lambda t: {"model": f"/models/{t}"}, lands="/models/"
        ),
        "served-model-name": Carrier(
            field, "served-model-name", lambda text: {"served_model_name": text}, lands=""
        ),
        "extra-arg": Carrier(field, "extra-arg", lambda text: {"extra_args": [text]}, lands=""),
        "env-value": Carrier(
            field, "env-value", lambda text: {"env": {"MY_PROFILE_VAR": text}}, lands=""
        ),
        "env-name": Carrier(field, "env-name", lambda text: {"env": {text: "1"}}, "BENIGN"),
    }
    return [carriers[name] for name in names]


CARRIERS: tuple[Carrier, ...] = (
    # NVIDIA driver and CUDA
    Carrier("nvidia_driver_source", "literal", _raw, "managed"),
    Carrier(
        "nvidia_driver_version", "suffix", _after(f"{_default('nvidia_driver_branch')}.48.01"), ""
    ),
    _path_carrier("nvidia_mok_key_file", "mok-key"),
    _path_carrier("nvidia_mok_cert_file", "mok-cert"),
    Carrier("nvidia_kernel_modules", "literal", _raw, "open"),
    Carrier("nvidia_driver_install", "literal", _raw, "compute"),
    *_url_carriers("nvidia_apt_mirror"),
    Carrier("nvidia_keyring_sha256", "suffix", _after("0" * 64), ""),
    Carrier("cuda_version", "suffix", _after(_default("cuda_version")), ""),
    # the SGLang server and the model
    Carrier("sglang_version", "suffix", _after(_default("sglang_version")), ""),
    Carrier("sglang_model_profile", "name", _raw, _default("sglang_model_profile")),
    Carrier("sglang_model_profile", "suffix", _after(_default("sglang_model_profile")), ""),
    *_ip_carriers("sglang_host", "0.0.0.0"),
    _path_carrier("sglang_api_key_file", "api-key"),
    Carrier("sglang_model_revision", "name", _raw, "v1.0"),
    Carrier("sglang_model_revision", "suffix", _after("main"), ""),
    Carrier("sglang_model_cache_dir", "suffix", _after("/var/lib/sglang/hub-")),
    *_url_carriers("hf_endpoint"),
    _path_carrier("hf_token_file", "hf-token"),
    # the Python environment
    *_url_carriers("pypi_index_url"),
    Carrier("uv_version", "suffix", _after(_default("uv_version")), ""),
    Carrier("python_version", "suffix", _after(_default("python_version")), ""),
    Carrier("venv_path", "suffix", _after("/opt/sglang/venv-")),
    *_url_carriers("torch_index_url"),
    # Used where PyPI's kernel is built for another CUDA major (SGLang 0.5.6 .. 0.5.10, CUDA 13).
    *_url_carriers("sglang_kernel_index_url", extra=(("sglang_version", "0.5.10"),)),
    Carrier("flash_attn_version", "suffix", _after(_default("flash_attn_version")), ""),
    Carrier("flash_attn_cuda_archs", "arch", lambda text: [f"90{text}"], ""),
    # profiles, the environment, multi-node, the router
    Carrier("sglang_profile_dirs", "folder", lambda text: [text], "profiles"),
    *_overrides(
        "sglang_profile_overrides",
        ("model", "org-model", "local-model", "served-model-name", "extra-arg", "env-value"),
    ),
    *_overrides("sglang_profile_overrides", ("env-name",)),
    Carrier("sglang_env", "value", lambda text: {"MY_VAR": text}, lands=""),
    Carrier("sglang_env", "name", lambda text: {text: "1"}, "BENIGN"),
    Carrier("sglang_multinode_group", "group", _raw, "pair"),
    # Lands in the env file as GLOO_SOCKET_IFNAME=eth<text> (and NCCL_SOCKET_IFNAME==eth...).
    Carrier("sglang_multinode_interface", "suffix", _after("eth"), "0", lands="eth"),
    *_url_carriers("sglang_router_worker_urls", WORKERS[0], lambda url: [url, WORKERS[1]]),
    *_ip_carriers("sglang_router_host", "127.0.0.1"),
    _path_carrier("sglang_router_api_key_file", "router-key"),
    # rolling driver upgrades
    Carrier("driver_rollout_max_unavailable", "suffix", _after("25%"), ""),
    # monitoring
    Carrier("monitoring_role", "literal", _raw, "off"),
    *_ip_carriers("monitoring_listen_address", "127.0.0.1"),
    *_ip_carriers("monitoring_exporter_address", CASE_ADDRESS),
    *_ip_carriers("monitoring_scrape_address", CASE_ADDRESS),
    _path_carrier("grafana_admin_password_file", "grafana"),
    *_url_carriers("monitoring_grafana_apt_url"),
    *_url_carriers("monitoring_grafana_key_url"),
    Carrier(
        "monitoring_grafana_key_fingerprint",
        "suffix",
        _after(data.monitoring().grafana.key_fingerprint),
        "",
    ),
    *_url_carriers("monitoring_sglang_dashboard_url"),
    # GPUs, A/B, the tuner, the audit, benchmarks
    Carrier("expected_gpu_model", "suffix", _after("NVIDIA B200"), ""),
    *_overrides("bench_ab_overrides", ("org-model", "extra-arg", "env-value")),
    Carrier(
        "tune_settings",
        "name",
        lambda text: [text],
        next(iter(data.tuning().settings)),
        (("bench_repeat", 2),),
    ),
    Carrier("audit_report_dir", "folder", _raw, "results/audit"),
    Carrier("bench_results_dir", "folder", _raw, "results"),
)
CARRIER_BY_ID = {carrier.id: carrier for carrier in CARRIERS}

# Accepted values that break the file they land in (or the validation itself): the case, and
# what breaks. Each is an expected failure until it is fixed (strict: a fix makes it pass).
# The first run found 15 (a '#' in an apt mirror's URL or Grafana's apt URL, a '#' password
# in curl's netrc, unbounded profile names and folders, an unbounded venv_path); all fixed.
KNOWN_BUGS: dict[tuple[str, str], str] = {}


def _text_typed(annotation: Any) -> bool:
    """Does the annotation take text: str, a path, a URL, an IP address, Any, a literal of
    strings (in a union, list or mapping too)?"""
    if annotation in (str, Path, HttpUrl, IPv4Address, IPv6Address, Any):
        return True
    if typing.get_origin(annotation) is typing.Literal:
        return any(isinstance(arg, str) for arg in typing.get_args(annotation))
    return any(_text_typed(arg) for arg in typing.get_args(annotation))


def text_fields() -> set[str]:
    return {name for name, info in HostConfig.model_fields.items() if _text_typed(info.annotation)}


# --- the verdicts: refused (by host data or the inventory) or accepted -----------------------


@dataclass(frozen=True)
class Verdict:
    refused: str | None  # where and why, or None
    config: HostConfig | None
    crashed: str | None = None  # validation raised instead of naming a problem


def _base(carrier: Carrier) -> dict[str, Any]:
    return MULTINODE_BASE if carrier.field in MULTINODE_FIELDS else BASE


def case_values(carrier: Carrier, text: str) -> dict[str, Any]:
    return {**_base(carrier), **dict(carrier.extra), carrier.field: carrier.build(text)}


def _texts() -> dict[str, str]:
    return {BENIGN: "", **HOSTILE}


def _text(carrier: Carrier, text_id: str) -> str:
    return carrier.benign if text_id == BENIGN else HOSTILE[text_id]


def _place_secret(field: str, value: Any) -> None:
    """The secret file a path field names, with content its reader takes (when the name is
    one a file can have)."""
    if field not in SECRET_FIELDS or not isinstance(value, str) or "\x00" in value:
        return
    try:
        path = Path(value)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(SECRET_FIELDS[field])
        path.chmod(0o600)
    except OSError:
        pass  # too long, or a name no file has: the validation finds no file


def _problem_text(problem) -> str:
    return f"{problem.field}: {problem.message}"


class _Inventories:
    """Inventory files written in one folder (pyinfra caches a compiled inventory by its file
    name: a new name each time), validated as `validate` validates them."""

    def __init__(self, folder: Path):
        self.folder, self.count = folder, 0

    def problems(self, groups: dict[str, list[tuple[str, dict]]]) -> list:
        self.count += 1
        path = self.folder / f"inventory_{self.count}.py"
        path.write_text(
            "".join(
                f"{group} = [{', '.join(f'({n!r}, {v!r})' for n, v in hosts)}]\n"
                for group, hosts in groups.items()
            )
        )
        try:
            validate_inventory(load_inventory_file(str(path)), warn=lambda _: None)
        except InventoryError as error:
            return error.problems
        return []


# Hosts validated in one inventory.
CHUNK = 60


def _batch_address(index: int) -> str:
    return f"10.1.{index // 250}.{index % 250 + 1}"


class _Judge:
    """The verdict of every case: host data first, then the inventory. Hosts are validated
    together in one inventory monitored by one server (one host per case); a host refused is
    taken out and the rest validated again until none is (monitoring's plan is checked only
    once every host's own values are good); an inventory whose validation raises is split
    until the case that makes it raise is found."""

    def __init__(self, folder: Path):
        self.inventories = _Inventories(folder)
        self.verdicts: dict[tuple[str, str], Verdict] = {}
        self.values: dict[tuple[str, str], dict[str, Any]] = {}
        self.configs: dict[tuple[str, str], HostConfig] = {}

    def judge(self) -> dict[tuple[str, str], Verdict]:
        for field in SECRET_FIELDS:
            _place_secret(field, f"secrets/base/{field}")
        for carrier in CARRIERS:
            for text_id in _texts():
                values = case_values(carrier, _text(carrier, text_id))
                _place_secret(carrier.field, values[carrier.field])
                config, problems = validate_host_data(CASE_NAME, values)
                if problems:
                    reason = "; ".join(_problem_text(p) for p in problems)
                    self.verdicts[carrier.id, text_id] = Verdict(f"host data: {reason}", None)
                else:
                    self.values[carrier.id, text_id] = values
                    self.configs[carrier.id, text_id] = config
        group = [
            key
            for key in self.values
            if key[0].startswith(tuple(f"{field}." for field in MULTINODE_FIELDS))
        ]
        for key in group:
            self._settle([key], self._pair)
        others = [key for key in self.values if key not in group]
        for start in range(0, len(others), CHUNK):
            self._settle(others[start : start + CHUNK], self._batch)
        return self.verdicts

    def _pair(self, keys: list) -> tuple[dict, dict[str, tuple[str, str]]]:
        # A multi-node member with its peer (whose problems would be the base's).
        [key] = keys
        peer = {**MULTINODE_BASE, "ssh_hostname": PEER_ADDRESS}
        groups = {
            "pair": [(CASE_NAME, self.values[key]), (PEER_NAME, peer)],
            "monitoring": [(MON_NAME, MON_VALUES)],
        }
        return groups, {CASE_NAME: key}

    def _batch(self, keys: list) -> tuple[dict, dict[str, tuple[str, str]]]:
        names = {f"case-{i}": key for i, key in enumerate(keys)}
        hosts = [
            (name, {**self.values[key], "ssh_hostname": _batch_address(i)})
            for i, (name, key) in enumerate(names.items())
        ]
        return {"gpus": hosts, "monitoring": [(MON_NAME, MON_VALUES)]}, names

    def _settle(self, keys: list, inventory: Callable) -> None:
        pending = list(keys)
        while pending:
            groups, names = inventory(pending)
            try:
                problems = self.inventories.problems(groups)
            except Exception as error:  # a crash is a finding of its own: find its case
                if len(pending) == 1:
                    crash = f"{type(error).__name__}: {error}"[:300]
                    self.verdicts[pending[0]] = Verdict(None, None, crash)
                    return
                half = len(pending) // 2
                self._settle(pending[:half], inventory)
                self._settle(pending[half:], inventory)
                return
            refused: dict[tuple[str, str], list] = {}
            for problem in problems:
                assert problem.host in names, f"not a case's problem: {problem}"
                refused.setdefault(names[problem.host], []).append(problem)
            for key, host_problems in refused.items():
                reason = "; ".join(_problem_text(p) for p in host_problems)
                self.verdicts[key] = Verdict(f"inventory: {reason}", None)
            if not refused:
                break
            pending = [key for key in pending if key not in refused]
        for key in pending:
            self.verdicts[key] = Verdict(None, self.configs[key])


@functools.cache
def _read_profile(name: str, extra_dirs: tuple[str, ...], folder: str):
    return _LOAD_PROFILE(name, extra_dirs)


_LOAD_PROFILE = profiles.load_profile
_CONNECTORS = functools.cache(pyinfra_connectors.get_all_connectors)
_EXECUTION_CONNECTORS = functools.cache(pyinfra_connectors.get_execution_connectors)


@contextlib.contextmanager
def _read_once():
    """What does not change while the test runs, read once: a profile file (load_profile
    reads and validates it on each call, four times for one host's validation) and pyinfra's
    connectors (read from the installed packages' metadata for each inventory)."""

    def load_profile(name, extra_dirs=()):
        return _read_profile(name, tuple(str(d) for d in extra_dirs), os.getcwd())

    with (
        mock.patch.object(profiles, "load_profile", load_profile),
        mock.patch.object(pyinfra_inventory, "get_all_connectors", lambda: dict(_CONNECTORS())),
        mock.patch.object(
            pyinfra_inventory,
            "get_execution_connectors",
            lambda: dict(_EXECUTION_CONNECTORS()),
        ),
    ):
        yield


@pytest.fixture(scope="module")
def verdicts() -> dict[tuple[str, str], Verdict]:
    return _verdicts()


@pytest.fixture(scope="module", autouse=True)
def _forgotten_afterwards():
    """The renders and checks kept for this module's tests, let go after them."""
    yield
    for kept in (_verdicts, _rendered, _checked, _structures, _decoded, structure):
        kept.cache_clear()


@functools.cache
def _verdicts() -> dict[tuple[str, str], Verdict]:
    """Every case's verdict, computed once in a folder of its own (relative secret paths)."""
    here = os.getcwd()
    folder = Path(tempfile.mkdtemp(prefix="hostile-render-"))
    os.chdir(folder)
    try:
        with _read_once():
            return _Judge(folder).judge()
    finally:
        os.chdir(here)
        shutil.rmtree(folder, ignore_errors=True)


# --- rendering: every file the roles write for a host ----------------------------------------


@dataclass(frozen=True)
class Output:
    # unit, env, yaml, prometheus, nft, shell, heredoc-shell, apt-list, apt-auth, netrc, sysctl
    kind: str
    text: str


@functools.cache
def _mon() -> tuple[HostConfig, Any]:
    config, problems = validate_host_data(MON_NAME, MON_VALUES)
    assert config is not None, problems
    return config, host_profile(config)


def _kind_of(path: str) -> str:
    if path.endswith((".service", ".timer", ".conf")):
        return "unit"
    if path.endswith(".env"):
        return "env"
    if path.endswith((".yaml", ".yml")):
        return "yaml"
    raise AssertionError(f"no parser for {path}")


def _commands(commands) -> list[str]:
    """The shell of a role's commands (uploads and functions have none)."""
    return [c.get_raw_value() for c in commands if isinstance(c, StringCommand)]


@functools.cache
def _grafana_commands(key_url: str, fingerprint: str, dashboard_url: str) -> tuple[str, ...]:
    """The shell of the operations that fetch Grafana's key and SGLang's dashboard, on a
    host that has neither."""
    keyring = data.monitoring().grafana.keyring
    key, _ = run_operation(
        grafana_keyring, {Command: None}, key_url=key_url, fingerprint=fingerprint, keyring=keyring
    )
    dashboard, _ = run_operation(sglang_dashboard_installed, {Command: None}, url=dashboard_url)
    return tuple(c for c in key + dashboard if not c.startswith("FunctionCommand("))


def _curl_netrc(config: HostConfig, src: str) -> str:
    """The netrc file curl reads the mirror's login from for the keyring's download, as
    roles/nvidia_repo.py writes it (its function, with this host's config)."""
    written: list[bytes] = []
    with (
        mock.patch.object(nvidia_repo, "host_config", lambda _: config),
        mock.patch.object(
            nvidia_repo, "put_private_file", lambda _h, text, *_: written.append(text)
        ),
    ):
        nvidia_repo._netrc_written(None, SimpleNamespace(name=CASE_NAME), "/root/k.netrc", src)
    [text] = written
    return text.decode()


@functools.cache
def _keyring_commands(src: str, netrc: bool) -> tuple[str, ...]:
    """The shell that downloads and installs the cuda-keyring .deb from ``src``."""
    repo = data.nvidia().repo
    commands, _ = run_operation(
        keyring_installed,
        {DebPackages: {}},
        package=repo.keyring_package,
        src=src,
        fingerprint=repo.signing_key_fingerprint,
        keyring_path=repo.keyring_path,
        download_dir=repo.download_dir,
        sha256="0" * 64,
        netrc=netrc,
    )
    return tuple(c for c in commands if not c.startswith("FunctionCommand("))


def render_all(config: HostConfig) -> dict[str, Output]:
    """Every file (and shell command) the roles would write or run for ``config`` as host
    gpu-1, monitored by the server ``mon``."""
    outputs: dict[str, Output] = {}
    profile = host_profile(config)
    group = config.sglang_multinode_group
    members = [CASE_NAME, PEER_NAME] if group else [CASE_NAME]
    node = node_position(config, CASE_NAME, members, CASE_ADDRESS) if group else NodePosition()
    # The SGLang service and its router (roles/sglang_service.py), side B of an A/B.
    sides = [("", config)]
    if config.bench_ab_overrides:
        sides.append(("ab-side-b:", ab_side_b(config)))
    for prefix, side in sides:
        service = planned_service_files(side, node, host_profile(side))
        for file in service.files:
            outputs[prefix + file.path] = Output(_kind_of(file.path), file.content)
    # The watchdog (roles/sglang_watchdog.py).
    if config.sglang_watchdog:
        for file in unit_files(config):
            outputs[file.path] = Output(_kind_of(file.path), file.content)
    # The multi-node firewall (roles/multinode_firewall.py), rendered as pyinfra renders it.
    if group:
        conf = data.multinode_firewall()
        plan = firewall_plan(group, [CASE_ADDRESS, PEER_ADDRESS], config.sglang_dist_init_port)
        low, high = plan.ephemeral_ports
        rendered = {
            "sglang-multinode-sysctl.conf.j2": ("sysctl", {"low": low, "high": high}),
            "sglang-firewall.nft.j2": ("nft", {"plan": plan}),
            "sglang-firewall.service.j2": (
                "unit",
                {"service_unit": "sglang.service", "table": conf.table},
            ),
        }
        for name, (kind, values) in rendered.items():
            text = get_template(template(name)).render(rules_path=conf.rules_path, **values)
            outputs[f"multinode:{name}"] = Output(kind, text)
    # Monitoring (roles/monitoring.py, roles/monitoring_firewall.py): the server's files with
    # this host among its targets, this host's exporters and metrics firewall.
    mon_config, mon_profile = _mon()
    hosts = [
        InventoryHost(MON_NAME, MON_ADDRESS, mon_config, True, mon_profile.max_running_requests),
        InventoryHost(
            CASE_NAME, CASE_ADDRESS, config, node.rank == 0, profile.max_running_requests
        ),
    ]
    metrics_on = {MON_NAME: mon_profile.enable_metrics, CASE_NAME: profile.enable_metrics}
    plan = monitoring_plan(hosts, metrics_on)
    listen = str(mon_config.monitoring_listen_address)
    outputs["prometheus.yml"] = Output("prometheus", monitoring.prometheus_config(plan, listen))
    outputs["sglang-alerts.yml"] = Output("yaml", monitoring.alert_rules_file(plan))
    outputs["default/prometheus"] = Output("env", monitoring.prometheus_defaults(listen))
    outputs["default/prometheus-node-exporter"] = Output(
        "env", monitoring.node_exporter_defaults(plan.exporters[CASE_NAME], plan.server)
    )
    dcgm = plan.target(JOB_DCGM, CASE_NAME)
    if dcgm is not None:
        outputs["dcgm-exporter.conf"] = Output(
            "unit", monitoring.dcgm_exporter_dropin(dcgm.address, plan.server)
        )
    outputs["grafana-datasource.yml"] = Output("yaml", monitoring.grafana_datasource(listen))
    outputs["grafana-dashboards.yml"] = Output("yaml", monitoring.grafana_dashboards_provider())
    outputs["grafana-server.conf"] = Output("unit", monitoring.grafana_dropin(listen))
    firewall = metrics_firewall_plan(hosts, CASE_NAME)
    if firewall is not None:
        outputs["metrics-firewall.nft"] = Output("nft", monitoring.metrics_firewall_rules(firewall))
        outputs["metrics-firewall.service"] = Output("unit", monitoring.metrics_firewall_unit())
    # Grafana's repository, key and SGLang's dashboard, from this host's settings (the role
    # reads them on the monitoring host: roles/monitoring.py grafana()).
    grafana = data.monitoring().grafana
    # Grafana's one-line source, as grafana() writes it.
    grafana_repo = str(config.monitoring_grafana_apt_url or grafana.repo_url).rstrip("/")
    outputs["grafana.list"] = Output(
        "apt-list",
        f"deb [signed-by={grafana.keyring}] {grafana_repo} {grafana.suite} "
        f"{' '.join(grafana.components)}\n",
    )
    dashboard_url = str(
        config.monitoring_sglang_dashboard_url or ""
    ) or grafana.sglang_dashboard_url.format(version=config.sglang_version)
    grafana_commands = _grafana_commands(
        str(config.monitoring_grafana_key_url or grafana.key_url),
        config.monitoring_grafana_key_fingerprint or grafana.key_fingerprint,
        dashboard_url,
    )
    for index, command in enumerate(grafana_commands):
        outputs[f"grafana-command-{index}"] = Output("shell", command)
    # The model download (roles/model.py): its transient unit, environment and preparation.
    if not is_local_model(profile.model):
        cache = hub_cache_dir(config.sglang_model_cache_dir)
        endpoint = str(config.hf_endpoint or DEFAULT_ENDPOINT).rstrip("/")
        python = f"{config.venv_path.rstrip('/')}/bin/python"
        outputs["model-download"] = Output(
            "shell",
            download_command(
                profile.model, "0" * 40, cache, 1, python, config.sglang_model_download_timeout_s
            ),
        )
        token = "(set)" if config.hf_token_file else None
        outputs["model-download.env"] = Output("env", download_env(endpoint, cache, token).decode())
        outputs["model-prepare"] = Output("heredoc-shell", prepare_command(cache))
    # The Python stack (roles/python_env.py): uv from the index, torch and SGLang.
    pypi = str(config.pypi_index_url)
    pip = index_options("pip", pypi)
    outputs["uv-install"] = Output(
        "shell",
        pip.command(
            QuoteString(f"{uv_prefix()}/bin/pip"),
            "install",
            *pip.args,
            QuoteString(f"uv=={config.uv_version}"),
        ).get_raw_value(),
    )
    stack = install_plan(
        config.sglang_version,
        config.cuda_version,
        pypi,
        str(config.torch_index_url) if config.torch_index_url else None,
        str(config.sglang_kernel_index_url) if config.sglang_kernel_index_url else None,
    )
    for index, step in enumerate(stack.steps):
        requirements = [f"{name}=={version}" for name, version in step.requirements.items()]
        options = ("--no-deps",) if step.no_deps else ()
        step_commands = uv_pip_install(
            config.venv_path, requirements, index_options("uv", step.index_url), *options
        )
        for number, command in enumerate(_commands(step_commands)):
            outputs[f"python-step-{index}-{number}"] = Output("shell", command)
    # NVIDIA's repository (roles/nvidia_repo.py): the list file, the mirror's login for apt
    # and for curl, the keyring's download.
    if config.nvidia_driver_source == "managed":
        repo = data.nvidia().repo
        platform = SimpleNamespace(nvidia_repo="ubuntu2404", nvidia_arch="x86_64")
        url, _ = split_login(nvidia_repo_url(config, platform))
        outputs["cuda-repo.list"] = Output(
            "apt-list",
            get_template(template("cuda-repo.list.j2")).render(
                keyring_path=repo.keyring_path, repo_url=url
            ),
        )
        login = mirror_login(config, CASE_NAME)
        if login is not None:
            outputs["apt-auth.conf"] = Output("apt-auth", apt_login_text(*login).decode())
            outputs["keyring.netrc"] = Output("netrc", _curl_netrc(config, url + repo.keyring_deb))
        for index, command in enumerate(
            _keyring_commands(url + repo.keyring_deb, login is not None)
        ):
            outputs[f"keyring-command-{index}"] = Output("shell", command)
    return outputs


# --- the parsers -----------------------------------------------------------------------------

WHITESPACE = " \t\n\r"
# libyaml's loader where PyYAML has it (the same YAML 1.1 reading, faster).
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
EXEC_KEYS = ("ExecStart", "ExecStartPre", "ExecStartPost", "ExecReload", "ExecStop")
WORD_KEYS = (*EXEC_KEYS, "Environment", "ReadWritePaths", "EnvironmentFile")
# Variables a unit splits into words ($ARGS in Debian's units; the router's launcher splits
# its worker URLs).
SPLIT_VARIABLES = ("ARGS", data.sglang_service().router.worker_urls_variable)


def _continues(line: str) -> bool:
    """Does the line end with a backslash that is not itself escaped (systemd joins it with
    the next line)?"""
    escaped = False
    for char in line:
        escaped = not escaped if char == "\\" else False
    return escaped


def unit_settings(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) as systemd's config parser reads a unit: lines split on '\\n'
    only, comment lines ('#', ';') ignored (inside a continuation too), a trailing backslash
    joining the next line with a space."""
    settings: list[tuple[str, str, str]] = []
    section = ""
    pending: str | None = None
    for line in text.split("\n"):
        stripped = line.strip(WHITESPACE)
        if pending is None and (not stripped or stripped[0] in "#;"):
            continue
        if pending is not None and stripped[:1] in ("#", ";"):
            continue
        if _continues(line):
            pending = (pending or "") + line[:-1] + " "
            continue
        logical = ((pending or "") + line).strip(WHITESPACE)
        pending = None
        if not logical:
            continue
        if logical.startswith("["):
            assert logical.endswith("]"), f"a broken section line: {logical!r}"
            section = logical[1:-1]
            continue
        key, equals, value = logical.partition("=")
        assert equals, f"a line that is no setting: {logical!r}"
        settings.append((section, key.strip(WHITESPACE), value.strip(WHITESPACE)))
    assert pending is None, "the file ends inside a continuation"
    return settings


_SPECIFIER = re.compile(r"%(.)", re.DOTALL)


def _resolve_specifiers(value: str) -> str:
    """systemd resolves specifiers over the whole value before splitting it: '%%' is '%', a
    known letter a value (here a word without spaces), anything else an error."""

    def one(match: re.Match) -> str:
        char = match[1]
        assert char == "%" or char.isalpha(), f"an invalid specifier %{char} in {value!r}"
        return "%" if char == "%" else "SPECIFIER"

    return _SPECIFIER.sub(one, value)


def systemd_words(value: str) -> list[str]:
    """A setting's words as systemd splits them (extract_first_word with unquoting and C
    escapes): quotes anywhere in a word, backslash escapes, an unquoted lone ';' a command
    separator (returned as ';;'). Each word is returned as written (escapes decoded)."""
    text = _resolve_specifiers(value)
    words: list[str] = []
    index, size = 0, len(text)
    while True:
        while index < size and text[index] in WHITESPACE:
            index += 1
        if index >= size:
            return words
        if text[index] == ";" and (index + 1 == size or text[index + 1] in WHITESPACE):
            words.append(";;")
            index += 1
            continue
        word: list[str] = []
        quote = None
        while index < size:
            char = text[index]
            if char == "\\":
                assert index + 1 < size, f"a trailing backslash in {value!r}"
                word.append(text[index + 1])
                index += 2
            elif quote:
                if char == quote:
                    quote = None
                else:
                    word.append(char)
                index += 1
            elif char in WHITESPACE:
                break
            elif char in "'\"":
                quote = char
                index += 1
            else:
                word.append(char)
                index += 1
        assert quote is None, f"unbalanced quotes in {value!r}"
        words.append("".join(word))


def _exec_shape(value: str) -> tuple[int, int]:
    """An Exec line's words and, of them, those systemd would split again at start: a word
    that is a whole ``$VAR`` (``$$`` is a '$')."""
    words = systemd_words(value)
    split = [w for w in words if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", w) or w == ";;"]
    return len(words), len(split)


def unit_structure(text: str) -> list[tuple]:
    structure: list[tuple] = []
    for section, key, value in unit_settings(text):
        if key in EXEC_KEYS:
            structure.append((section, key, _exec_shape(value)))
        elif key in WORD_KEYS:
            structure.append((section, key, len(systemd_words(value))))
        else:
            structure.append((section, key))
    return structure


def env_assignments(text: str) -> list[tuple[str, str]]:
    """(name, value) as systemd reads an EnvironmentFile= (src/basic/env-file.c,
    parse_env_file_internal, before v254: a comment ending in a backslash goes on)."""
    found: list[tuple[str, str]] = []
    state, key, value = "pre_key", "", ""
    for char in text + "\n":
        if state == "pre_key":
            if char in "#;":
                state = "comment"
            elif char not in WHITESPACE:
                state, key = "key", char
        elif state == "key":
            if char in "\n\r":
                state, key = "pre_key", ""
            elif char == "=":
                state, value = "pre_value", ""
            else:
                key += char
        elif state in ("pre_value", "value"):
            if char in "\n\r":
                # An unquoted value loses its trailing blanks, a quoted one keeps them.
                kept = value.rstrip(WHITESPACE) if state == "value" else value
                found.append((key.rstrip(WHITESPACE), kept))
                state = "pre_key"
            elif char == "\\":
                state = "value_escape"
            elif state == "pre_value" and char == "'":
                state = "single_quote"
            elif state == "pre_value" and char == '"':
                state = "double_quote"
            elif state == "value" or char not in WHITESPACE:
                state, value = "value", value + char
        elif state == "value_escape":
            state = "value"
            if char not in "\n\r":
                value += char
        elif state == "single_quote":
            if char == "'":
                state = "pre_value"
            else:
                value += char
        elif state == "double_quote":
            if char == '"':
                state = "pre_value"
            elif char == "\\":
                state = "double_quote_escape"
            else:
                value += char
        elif state == "double_quote_escape":
            state = "double_quote"
            if char in '"\\`$':
                value += char
            elif char != "\n":
                value += "\\" + char
        elif state == "comment":
            if char == "\\":
                state = "comment_escape"
            elif char in "\n\r":
                state = "pre_key"
        elif state == "comment_escape":
            state = "comment"
    assert state == "pre_key", f"the file ends in state {state}"
    return found


def env_structure(text: str) -> list[tuple]:
    """The variables (in any order: systemd sets them all), with the words of those a unit
    splits."""
    return sorted(
        (name, len(value.split())) if name in SPLIT_VARIABLES else (name,)
        for name, value in env_assignments(text)
    )


def yaml_shape(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(key): yaml_shape(value) for key, value in node.items()}
    if isinstance(node, list):
        return [yaml_shape(value) for value in node]
    return type(node).__name__


def nft_structure(text: str) -> tuple[int, list[str]]:
    """The file's line count and its rule lines, comments ('#' to the end of the line)
    stripped; braces balanced."""
    rules = [line.split("#", 1)[0].strip() for line in text.split("\n")]
    rules = [line for line in rules if line]
    joined = "".join(rules)
    assert joined.count("{") == joined.count("}"), text
    return len(text.split("\n")), rules


def shell_text(command: str) -> str:
    """The command with the random name of an index login's staging file made one name (so
    that each command is checked once)."""
    return re.sub(r"(pyinfra-sglang-index\.)[0-9a-f]{32}", r"\1STAGING", command)


def shell_structure(command: str, heredoc: bool = False) -> int:
    """The command's words as a POSIX shell splits them (a here-document's body is data: the
    words of its first line)."""
    return len(shlex.split(command.split("\n", 1)[0] if heredoc else command))


def apt_words(text: str) -> list[int]:
    """Each source line's words as apt reads a one-line sources file: '#' outside [...]
    starts a comment; quoted words and [options] are one word each."""
    counts = []
    for line in text.split("\n"):
        kept, inside = [], False
        for char in line:
            if char == "[":
                inside = True
            elif char == "]":
                inside = False
            elif char == "#" and not inside:
                break
            kept.append(char)
        words = re.findall(r'\[[^\]]*\]|"[^"]*"|[^\s"]+', "".join(kept))
        if words:
            counts.append(len(words))
    return counts


def netrc_tokens(text: str) -> list[list[str]]:
    """Each line's tokens as curl reads a netrc file: whitespace separates them, a token
    starting with '#' is a comment to the end of the line (curl 7.88 sends an empty
    password for ``password #secret``)."""
    lines = []
    for line in text.split("\n"):
        tokens = []
        for token in line.split():
            if token.startswith("#"):
                break
            tokens.append(token)
        if tokens:
            lines.append(tokens)
    return [[t if t in ("machine", "login", "password") else "*" for t in ts] for ts in lines]


def apt_auth_tokens(text: str) -> list[list[str]]:
    """Each line's tokens as apt reads its auth.conf: whitespace separates them, a line whose
    first token starts with '#' is a comment (apt 2.6 takes ``password #secret`` whole)."""
    lines = [line.split() for line in text.split("\n")]
    lines = [tokens for tokens in lines if tokens and not tokens[0].startswith("#")]
    return [[t if t in ("machine", "login", "password") else "*" for t in ts] for ts in lines]


def sysctl_structure(text: str) -> list[str]:
    return [
        line.split("=", 1)[0].strip()
        for line in text.split("\n")
        if line.strip() and not line.lstrip().startswith(("#", ";"))
    ]


@functools.cache
def structure(output: Output) -> Any:
    kind, text = output.kind, output.text
    if kind == "unit":
        return unit_structure(text)
    if kind == "env":
        return env_structure(text)
    if kind in ("yaml", "prometheus"):
        return yaml_shape(yaml.load(text, Loader=YAML_LOADER))
    if kind == "nft":
        return nft_structure(text)
    if kind in ("shell", "heredoc-shell"):
        return shell_structure(shell_text(text), heredoc=kind == "heredoc-shell")
    if kind == "apt-list":
        return apt_words(text)
    if kind == "netrc":
        return netrc_tokens(text)
    if kind == "apt-auth":
        return apt_auth_tokens(text)
    if kind == "sysctl":
        return sysctl_structure(text)
    raise AssertionError(kind)


# --- the real tools, where this machine has them ---------------------------------------------

# What systemd-analyze says of what this machine lacks: the programs, the units named.
ENVIRONMENTAL = ("is not executable", "not found", "Failed to load", "No such file")


@functools.cache
def _systemd_analyze_works() -> bool:
    """Does ``systemd-analyze verify`` read a unit here (it needs no running systemd)?"""
    if not shutil.which("systemd-analyze"):
        return False
    with tempfile.TemporaryDirectory() as folder:
        unit = Path(folder) / "probe.service"
        unit.write_text("[Service]\nType=oneshot\nExecStart=/bin/true\n")
        try:
            done = subprocess.run(
                ["systemd-analyze", "verify", "--man=no", str(unit)],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0 and not (done.stdout + done.stderr).strip()


def systemd_verify_all(units: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, ...]]:
    """What ``systemd-analyze verify`` says of each (file name, text) unit, all read in one
    run: each under a name of its own (a drop-in over a unit of its own), the names made one
    in what it says, what this machine lacks left out."""
    said: dict[tuple[str, str], list[str]] = {unit: [] for unit in units}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        paths, by_stem = [], {}
        for number, (name, text) in enumerate(sorted(units)):
            if name.endswith(".timer"):
                unit = root / f"t{number}.timer"
                unit.write_text(text)
            elif name.endswith(".service"):
                unit = root / f"u{number}.service"
                unit.write_text(text)
            else:
                unit = root / f"d{number}.service"
                unit.write_text("[Service]\nExecStart=/bin/true\n")
                (root / f"d{number}.service.d").mkdir()
                (root / f"d{number}.service.d" / "override.conf").write_text(text)
            paths.append(str(unit))
            by_stem[unit.stem] = (name, text)
        done = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", "--recursive-errors=no", *paths],
            capture_output=True,
            text=True,
        )
        lines = (done.stdout + done.stderr).replace(f"{folder}/", "").splitlines()
    for line in lines:
        if not line.strip() or any(lacking in line for lacking in ENVIRONMENTAL):
            continue
        match = re.search(r"\b([tud]\d+)\.(?:service|timer)\b", line)
        if match and match[1] in by_stem:  # (a line of no unit is of the machine: left out)
            unit_said = re.sub(r"\b[tud]\d+\.(service|timer)", r"UNIT.\1", line)
            said[by_stem[match[1]]].append(unit_said)
    return {unit: tuple(lines) for unit, lines in said.items()}


def _nft_check(text: str) -> str | None:
    with tempfile.NamedTemporaryFile("w", suffix=".nft") as file:
        file.write(text)
        file.flush()
        try:
            done = subprocess.run(
                ["nft", "-c", "-f", file.name], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return str(error)
    return None if done.returncode == 0 else done.stderr.replace(file.name, "FILE")


# What the firewalls' files use: sets, a filter chain on input, iif, ct state, counters.
NFT_PROBE = """table inet probe {
\tset addresses {
\t\ttype ipv4_addr
\t\telements = { 10.0.0.1 }
\t}
\tchain input {
\t\ttype filter hook input priority filter; policy accept;
\t\tiif "lo" accept
\t\tip saddr @addresses accept
\t\ttcp dport { 9100, 32768-60999 } ct state new counter drop
\t}
}
"""


@functools.cache
def _nft_works() -> bool:
    """Does ``nft -c`` check a ruleset like the firewalls' here (it needs the netfilter netlink
    socket: root, or a container that has it)?"""
    return bool(shutil.which("nft")) and _nft_check(NFT_PROBE) is None


def _bash_alone(command: str) -> str | None:
    done = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True)
    return None if done.returncode == 0 and not done.stderr else done.stderr or "bash -n failed"


def bash_check_all(commands: set[str]) -> dict[str, str | None]:
    """``bash -n`` of each command: None where it parses, else what bash says. All in one run
    (each the body of a function of its own); each alone where that run fails."""
    ordered = sorted(commands)
    script = "".join(f"_command_{i}() {{\n{command}\n}}\n" for i, command in enumerate(ordered))
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    if done.returncode == 0 and not done.stderr:
        return dict.fromkeys(ordered)
    return {command: _bash_alone(command) for command in ordered}


def _promtool(folder: Path) -> str | None:
    done = subprocess.run(
        ["promtool", "check", "config", "prometheus.yml"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else done.stdout + done.stderr


def promtool_all(pairs: set[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """``promtool check config`` of each (prometheus.yml, alert rules): None where it accepts
    them, else what it says."""
    rules = data.monitoring().prometheus.rules.rsplit("/", 1)[-1]
    with tempfile.TemporaryDirectory() as folder:
        folders = {}
        for number, (config, alerts) in enumerate(sorted(pairs)):
            sub = Path(folder) / str(number)
            sub.mkdir()
            (sub / "prometheus.yml").write_text(config)
            (sub / rules).write_text(alerts)
            folders[config, alerts] = sub
        done = subprocess.run(
            ["promtool", "check", "config", *(str(f / "prometheus.yml") for f in folders.values())],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return dict.fromkeys(folders)
        return {pair: _promtool(sub) for pair, sub in folders.items()}


def _apt_errors(parts: Path, folder: Path) -> list[str]:
    done = subprocess.run(
        [
            "apt-get",
            *("-o", f"Dir::Etc::SourceList={folder}/none.list"),
            *("-o", f"Dir::Etc::SourceParts={parts}"),
            *("-o", f"Dir::State::Lists={folder}/lists"),
            *("-o", f"Dir::Cache={folder}/cache"),
            *("-o", "Debug::NoLocking=1"),
            "indextargets",
        ],
        capture_output=True,
        text=True,
    )
    return sorted({line for line in (done.stdout + done.stderr).splitlines() if line[:2] == "E:"})


def apt_check_all(lists: set[str]) -> dict[str, str | None]:
    """What apt-get says reading each one-line sources file: None where it reads it, else its
    errors. All in one sources.list.d; a file apt names in an error is taken out, the rest
    read again."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        parts = folder / "sources.list.d"
        parts.mkdir()
        by_file = {}
        for number, text in enumerate(sorted(lists)):
            (parts / f"l{number}.list").write_text(text)
            by_file[f"l{number}.list"] = text
        said: dict[str, str | None] = dict.fromkeys(lists)
        while errors := _apt_errors(parts, folder):
            by_named: dict[str, list[str]] = {}
            for line in errors:
                if match := re.search(r"\b(l\d+\.list)\b", line):
                    by_named.setdefault(match[1], []).append(line.replace(str(parts), "PARTS"))
            assert by_named, errors
            for file, lines in by_named.items():
                said[by_file[file]] = "; ".join(lines).replace(file, "FILE")
                (parts / file).unlink()
    return said


# --- every accepted case rendered, its files checked, their structures ------------------------


@dataclass(frozen=True)
class Checked:
    verify: dict[tuple[str, str], tuple[str, ...]]  # (file name, unit) -> systemd-analyze
    bash: dict[str, str | None]  # command -> bash -n
    promtool: dict[tuple[str, str], str | None]  # (prometheus.yml, rules) -> promtool
    apt: dict[str, str | None]  # sources file -> apt-get
    nft: dict[str, str | None]  # nftables file -> nft -c


@functools.cache
def _rendered() -> dict[tuple[str, str], dict[str, Output]]:
    with _read_once():
        return {
            key: render_all(verdict.config)
            for key, verdict in _verdicts().items()
            if verdict.config is not None
        }


@functools.cache
def _checked() -> Checked:
    """Every distinct unit, command and Prometheus config of every accepted case, each checked
    once by the tool that reads it (one run per tool)."""
    units: set[tuple[str, str]] = set()
    commands: set[str] = set()
    prometheus: set[tuple[str, str]] = set()
    sources: set[str] = set()
    rulesets: set[str] = set()
    for outputs in _rendered().values():
        for name, output in outputs.items():
            if output.kind == "unit":
                units.add((Path(name).name, output.text))
            elif output.kind in ("shell", "heredoc-shell"):
                commands.add(shell_text(output.text))
            elif output.kind == "apt-list":
                sources.add(output.text)
            elif output.kind == "nft":
                rulesets.add(output.text)
        prometheus.add((outputs["prometheus.yml"].text, outputs["sglang-alerts.yml"].text))
    return Checked(
        systemd_verify_all(units) if _systemd_analyze_works() else {},
        bash_check_all(commands),
        promtool_all(prometheus) if shutil.which("promtool") else {},
        apt_check_all(sources) if shutil.which("apt-get") else {},
        {text: _nft_check(text) for text in rulesets} if _nft_works() else {},
    )


@functools.cache
def _structures(carrier_id: str, text_id: str) -> dict[str, Any]:
    """Each file's structure as its reader reads it, and what the real tools say of it."""
    outputs = _rendered()[carrier_id, text_id]
    checked = _checked()
    text = _text(CARRIER_BY_ID[carrier_id], text_id)
    found: dict[str, Any] = {}
    for name, output in outputs.items():
        shape = structure(output)
        if output.kind == "env" and text:
            # A variable the text names (sglang_env's names): the same variable, by its place.
            shape = sorted(
                ("<the value>", *rest) if n == text else (n, *rest) for n, *rest in shape
            )
        found[name] = shape
        if output.kind == "unit" and checked.verify:
            found[f"systemd-analyze:{name}"] = checked.verify[Path(name).name, output.text]
        if output.kind in ("shell", "heredoc-shell"):
            found[f"bash -n:{name}"] = checked.bash[shell_text(output.text)]
        if output.kind == "apt-list" and checked.apt:
            found[f"apt-get:{name}"] = checked.apt[output.text]
        if output.kind == "nft" and checked.nft:
            found[f"nft -c:{name}"] = checked.nft[output.text]
    if checked.promtool:
        pair = (outputs["prometheus.yml"].text, outputs["sglang-alerts.yml"].text)
        found["promtool check config"] = checked.promtool[pair]
    return found


@functools.cache
def _decoded(carrier_id: str, text_id: str) -> frozenset[str]:
    """Every value the case's env files set and every word of its units' Exec lines, decoded
    as systemd decodes them ('$$' is '$' when the command starts)."""
    values: set[str] = set()
    for output in _rendered()[carrier_id, text_id].values():
        if output.kind == "env":
            values.update(value for _, value in env_assignments(output.text))
        elif output.kind == "unit":
            for _, key, value in unit_settings(output.text):
                if key in EXEC_KEYS:
                    values.update(word.replace("$$", "$") for word in systemd_words(value))
    return frozenset(values)


def _has_login(value: Any) -> bool:
    urls = value if isinstance(value, list) else [value]
    return any(url is not None and (url.username or url.password) for url in urls)


def _baseline(carrier_id: str, config: HostConfig) -> str:
    """The carrier whose benign value the case is compared with: its own; for a password
    that ended the URL's authority early (an unencoded '#': ``https://user:#a@host`` is the
    host ``user`` with a fragment, no login), the field's URL without a login."""
    carrier = CARRIER_BY_ID[carrier_id]
    if carrier.name == "url-password" and not _has_login(getattr(config, carrier.field)):
        return f"{carrier.field}.url-path"
    return carrier_id


def _cases():
    for carrier in CARRIERS:
        for text_id in HOSTILE:
            bug = KNOWN_BUGS.get((carrier.id, text_id))
            marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
            yield pytest.param(carrier.id, text_id, marks=marks, id=f"{carrier.id}-{text_id}")


# --- the tests -------------------------------------------------------------------------------


def test_every_text_field_of_the_inventory_is_tried():
    assert {carrier.field for carrier in CARRIERS} == text_fields()


@pytest.mark.parametrize("carrier_id", [carrier.id for carrier in CARRIERS])
def test_the_benign_value_validates_and_renders_files_their_readers_accept(verdicts, carrier_id):
    verdict = verdicts[carrier_id, BENIGN]
    assert verdict.refused is None and verdict.crashed is None, verdict
    found = _structures(carrier_id, BENIGN)
    tools = ("systemd-analyze:", "bash -n:", "promtool", "apt-get:", "nft -c:")
    complaints = {name: said for name, said in found.items() if name.startswith(tools) and said}
    assert not complaints


@pytest.mark.parametrize(("carrier_id", "text_id"), list(_cases()))
def test_a_hostile_value_is_refused_or_changes_no_files_structure(verdicts, carrier_id, text_id):
    verdict = verdicts[carrier_id, text_id]
    assert verdict.crashed is None, f"validation raised instead of refusing: {verdict.crashed}"
    if verdict.refused is not None:
        return  # refused before anything is rendered: what validation is for
    found = _structures(carrier_id, text_id)
    expected = _structures(_baseline(carrier_id, verdict.config), BENIGN)
    assert sorted(found) == sorted(expected), set(found) ^ set(expected)
    changed = {
        name: (found[name], expected[name]) for name in found if found[name] != expected[name]
    }
    assert not changed, f"accepted {HOSTILE[text_id]!r:.60} and changed (found, benign): {changed}"
    lands = CARRIER_BY_ID[carrier_id].lands
    if lands is not None:
        # Escaped, not mangled: the reader gets the text back whole.
        assert lands + HOSTILE[text_id] in _decoded(carrier_id, text_id)
