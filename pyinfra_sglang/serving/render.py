"""The SGLang service's files, rendered without touching a host.

Pure functions: a profile, an SGLang release and a few deployment values in; the server's
argv, its systemd unit, its environment file and its YAML config file out. The role and
``pyinfra-sglang render`` call the same functions, so what the CLI prints is what a host gets.

Secrets: the API key goes only into the YAML config file (``--config``), the Hugging Face
token only into the environment file, the router's key only into the router's environment
file; none is ever on a command line. These files are 0600 (``data/sglang_service.toml``).
Functions that take a secret take ``mask`` too, to print ``********`` in its place.

Nothing with a control character goes into a unit, env or config file: systemd refuses a
unit with a NUL or a carriage return, and a newline starts a new setting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pyinfra.api.exceptions import PyinfraError

from pyinfra_sglang import data
from pyinfra_sglang.data_models import Gateway
from pyinfra_sglang.gpu_links.p2p import P2P_KEYS, P2PHint, disable_env, p2p_hint
from pyinfra_sglang.redact import redact
from pyinfra_sglang.serving.extra_args import extra_args_problems
from pyinfra_sglang.serving.placement import Placement, check_min_version
from pyinfra_sglang.serving.profiles import Profile, control_characters_in
from pyinfra_sglang.serving.sglang_flags import (
    FlagVersionError,
    dp_attention_intents,
    flag_table,
    mtp_intents,
)
from pyinfra_sglang.templating import render_template
from pyinfra_sglang.versions import parse_version

SERVER_MODULE = "sglang.launch_server"


class RenderError(PyinfraError):
    """Deployment values that cannot make a working service (bad path, bad node rank...).
    ``field``: the inventory field the value came from, where the renderer knows it."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def check_text(text: str, what: str, field: str | None = None) -> str:
    """``text`` when it has no control character; RenderError naming ``what`` otherwise."""
    found = control_characters_in(text)
    if found:
        raise RenderError(
            f"{what} has control characters ({', '.join(found)}), which cannot go into a "
            f"unit, env or config file: {text!r}",
            field,
        )
    return text


@dataclass(frozen=True)
class RenderedFile:
    """One file of the service: where it goes, its content and its octal mode."""

    path: str
    content: str = field(repr=False)  # may hold secrets: never in a repr (logs, -vv output)
    mode: str


def mask_text() -> str:
    return data.sglang_service().secrets.mask


# --- checks --------------------------------------------------------------------------


# --- argv ------------------------------------------------------------------------------


def _check_multinode(nnodes: int, node_rank: int, dist_init_addr: str | None) -> None:
    if nnodes < 1:
        raise RenderError(f"nnodes must be at least 1, not {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise RenderError(f"node_rank {node_rank} is outside 0..{nnodes - 1} for {nnodes} node(s)")
    if nnodes > 1 and not dist_init_addr:
        raise RenderError(f"{nnodes} nodes need dist_init_addr (HEAD:PORT), the same on every node")
    if dist_init_addr is not None:
        check_host_port(dist_init_addr)


_HOST_PORT = re.compile(r"^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):([0-9]{1,5})$")


def check_host_port(text: str) -> None:
    """dist_init_addr as SGLang splits it: HOST:PORT (an IPv6 address in brackets), the host
    an address or a DNS name, the port 1 to 65535."""
    match = _HOST_PORT.match(text)
    if not match or not 1 <= int(match[3]) <= 65535:
        raise RenderError(
            f"dist_init_addr {text!r} is not HOST:PORT (an IPv6 address in brackets, a port "
            "from 1 to 65535)"
        )


def _check_config_path(config_path: str | None) -> None:
    if config_path is not None and not re.search(r"\.ya?ml$", config_path):
        raise RenderError(f"SGLang reads only .yaml/.yml config files, not {config_path}")


def _intent_values(
    profile: Profile,
    tp_size: int,
    host: str,
    port: int,
    config_path: str | None,
    nnodes: int,
    node_rank: int,
    dist_init_addr: str | None,
    revision: str | None = None,
) -> dict[str, Any]:
    """Intent -> value; None or False means "not on the command line".

    An intent of data/sglang_flags.toml named as a profile field takes that field's value
    (a new flag for a profile field is one [[flag]] entry); the table below holds only the
    intents of the deployment, the renamed fields and the values that hang on another one."""
    multinode = nnodes > 1
    explicit = {
        "model_path": profile.model,
        "revision": revision,  # the host's, resolved: the profile's is only its default
        "tp_size": tp_size,
        # MoE parallelism (parallelism.py checks the layout): off where unset or 1.
        "ep_size": profile.ep_size if (profile.ep_size or 1) > 1 else None,
        "attn_dp_size": None,  # server_args: spelled per release (dp_attention_intents)
        "enable_dp_attention": None,
        "nnodes": nnodes if multinode else None,
        "node_rank": node_rank if multinode else None,
        "dist_init_addr": dist_init_addr if multinode else None,
        "cuda_graph_max_bs": profile.cuda_graph_max_bs if profile.cuda_graph else None,
        "disable_cuda_graph": not profile.cuda_graph,
        **mtp_intents(profile.mtp, profile.mtp_num_steps),
        "watchdog_timeout": profile.watchdog_timeout_s,
        "host": str(host),
        "port": port,
        "config": config_path,
    }
    fields = type(profile).model_fields
    by_name = {
        intent: getattr(profile, intent)
        for intent in flag_table()
        if intent in fields and intent not in explicit
    }
    return {**by_name, **explicit}


def _reads_as_a_flag(text: str) -> bool:
    """Does a flag's value start with '-' without being a number (which argparse reads as a
    value)?"""
    if not text.startswith("-"):
        return False
    try:
        float(text)
    except ValueError:
        return True
    return False


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def server_args(
    placement: Placement,
    host: str,
    port: int,
    config_path: str | None,
    revision: str | None = None,
) -> list[str]:
    """The arguments of ``python -m sglang.launch_server`` for the profile as ``placement``
    runs it (its release, TP size and place in a multi-node group), spelled for that
    release, in the stable order of data/sglang_flags.toml, then the profile's extra_args.

    FlagVersionError when the release is older than the profile allows or lacks a flag the
    profile asks for (all such flags named at once)."""
    profile, sglang_version, tp_size = (
        placement.profile,
        placement.sglang_version,
        placement.tp_size,
    )
    nnodes, node_rank = placement.node.nnodes, placement.node.rank
    dist_init_addr = placement.node.dist_init_addr
    check_min_version(profile, sglang_version)
    _check_multinode(nnodes, node_rank, dist_init_addr)
    _check_config_path(config_path)
    problems = extra_args_problems(profile.extra_args)
    if problems:
        raise RenderError(f"profile {profile.name}: extra_args: " + "; ".join(problems))
    values = _intent_values(
        profile, tp_size, host, port, config_path, nnodes, node_rank, dist_init_addr, revision
    )
    values.update(dp_attention_intents(profile.dp_attention_size or 1, sglang_version))
    version = parse_version(sglang_version)
    argv: list[str] = []
    missing: list[str] = []
    dashed: list[str] = []
    for intent, entry in flag_table().items():
        value = values[intent]
        if value is None or value is False:
            continue
        flag = entry.flag_in(version)
        if flag is None:
            known = "; ".join(s.describe() for s in entry.spellings)
            missing.append(f"{intent} = {value!r} ({known})")
            continue
        if entry.kind == "switch":
            argv.append(flag)
            continue
        text = _format_value(value)
        if _reads_as_a_flag(text):
            dashed.append(f"{intent} = {text!r}")
        argv += [flag, text]
    if dashed:
        # argparse would take such a value for a flag of its own (--host=0.0.0.0 in `model`):
        # a crash loop at best, a changed bind at worst.
        raise RenderError(
            f"profile {profile.name}: " + ", ".join(dashed) + " starts with '-', which SGLang's "
            "parser reads as a flag, not a value; allowed: values that do not start with '-'"
        )
    if missing:
        raise FlagVersionError(
            f"profile {profile.name}: SGLang {sglang_version} has no flag for "
            + ", ".join(missing)
            + ": pin an SGLang release that has them, or use a profile without them"
        )
    return argv + list(profile.extra_args)


# --- systemd quoting -------------------------------------------------------------------

_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./\[\]-]+$")


def _systemd_text(text: str) -> str:
    """Free text for a unit setting: '%' starts a specifier, so it is doubled; no control
    characters (a newline would start a new setting, NUL and CR make systemd refuse the unit)."""
    check_text(text, "a unit file setting")
    return text.replace("%", "%%")


def systemd_quote(arg: str) -> str:
    """One ExecStart word: specifiers ('%') and variables ('$') escaped, quoted if needed."""
    text = _systemd_text(arg).replace("$", "$$")
    if _SAFE_WORD.match(arg):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_start(argv: Sequence[str]) -> str:
    """ExecStart's value: the program line, then one line per flag and its values."""
    lines: list[list[str]] = []
    for index, word in enumerate(argv):
        if index == 0 or (word.startswith("--") and index > 2):
            lines.append([])
        lines[-1].append(systemd_quote(word))
    return " \\\n    ".join(" ".join(line) for line in lines)


# Paths on the host that go into units and env files unquoted: the characters that need no
# quoting or escaping anywhere (systemd, env files, shells).
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")


def _absolute_path(path: str, what: str) -> str:
    if not _SAFE_PATH.match(path):
        raise RenderError(
            f"{what} must be an absolute path of letters, digits, '.', '_', '-' and '/': {path!r}",
            what,
        )
    return path


# --- templates -------------------------------------------------------------------------


def render_unit(
    profile: Profile,
    argv: Sequence[str],
    sglang_version: str,
    venv_path: str,
    env_path: str | None = None,
    cache_root: str | None = None,
) -> str:
    """sglang.service running ``<venv>/bin/python -m sglang.launch_server <argv>`` as the
    service user, sandboxed, with write access to the cache folders under ``cache_root``."""
    if any(arg.split("=", 1)[0] == "--api-key" for arg in argv):
        raise RenderError("--api-key must not be on the command line; it goes into the config file")
    settings = data.sglang_service()
    python = _absolute_path(venv_path, "venv_path").rstrip("/") + "/bin/python"
    return render_template(
        "sglang.service.j2",
        profile_name=profile.name,
        sglang_version=sglang_version,
        description=_systemd_text(f"SGLang server ({profile.name}: {profile.model})"),
        env_path=_absolute_path(env_path or settings.files.env.path, "env_path"),
        exec_start=exec_start([python, "-m", SERVER_MODULE, *argv]),
        restart_sec=settings.unit.restart_sec,
        timeout_stop_s=profile.drain_timeout_s,
        start_limit_burst=settings.unit.start_limit_burst,
        start_limit_interval_s=settings.unit.start_limit_burst
        * (profile.start_timeout_s + settings.unit.restart_sec),
        limit_nofile=settings.unit.limit_nofile,
        service_user=settings.service_user,
        read_write_paths=list(cache_dirs(cache_root).values()),
    )


def cache_dirs(cache_root: str | None = None) -> dict[str, str]:
    """Cache variable -> folder on persistent disk (the role creates them), sorted."""
    cache_settings = data.sglang_service().environment.cache
    root = _absolute_path(cache_root or cache_settings.root, "cache_root").rstrip("/")
    return {name: f"{root}/{sub}" for name, sub in sorted(cache_settings.dirs.items())}


def _env_value(name: str, value: str) -> str:
    """A value as systemd's EnvironmentFile reads it: double-quoted when not a plain word.
    The value itself is never shown in an error: it may be a secret."""
    found = control_characters_in(value)
    if found:
        raise RenderError(
            f"{name} has control characters ({', '.join(found)}), which cannot go into an "
            "environment file"
        )
    if re.match(r"^[A-Za-z0-9_@%+=:,./*-]*$", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def managed_env_names() -> frozenset[str]:
    """Variables the renderer sets itself: a profile's env or the inventory's sglang_env must
    not set them (the caches, PATH, CUDA_HOME, the Hub's token, offline switch and cache)."""
    cache = data.sglang_service().environment.cache.dirs
    return frozenset({*cache, "PATH", "CUDA_HOME", "HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"})


def nccl_p2p_level(widest_path: str | None) -> str:
    """NCCL_P2P_LEVEL for GPUs whose widest GPU-to-GPU path in ``nvidia-smi topo -m`` is
    ``widest_path`` (e.g. SYS); the data's default when the topology was not read."""
    levels = data.sglang_service().environment.nccl_p2p_level
    return levels.by_path.get(widest_path or "", levels.default)


def nccl_p2p_env(
    widest_path: str | None, hint: P2PHint | None, extra: Mapping[str, str] | None = None
) -> tuple[dict[str, str], str | None]:
    """The P2P variables of a PCIe-only host and the env file's comment on why: the level
    where P2P works, NCCL_P2P_DISABLE=1 where ACS/IOMMU redirect it, neither where NVML
    reports none (pyinfra_sglang/gpu_links/p2p.py); nothing when the host's sglang_env sets one of
    them. ``hint`` None: not read from a host (the level, no comment)."""
    if hint is None:
        return {"NCCL_P2P_LEVEL": nccl_p2p_level(widest_path)}, None
    if set(extra or {}) & set(P2P_KEYS):
        return {}, f"NCCL P2P: as sglang_env sets it (the host read: {hint.reason})"
    if hint.mode == "disable":
        values = disable_env()
        shown = " ".join(f"{k}={v}" for k, v in values.items())
        return values, f"{shown}: {hint.reason}"
    if hint.mode == "none":
        return {}, f"no NCCL P2P setting: {hint.reason}"
    level = nccl_p2p_level(widest_path)
    return {"NCCL_P2P_LEVEL": level}, f"NCCL_P2P_LEVEL={level}: {hint.reason}"


@dataclass(frozen=True)
class EnvSpec:
    """What sglang.env is made of: the venv (PATH), the caches' root, CUDA_HOME, whether the
    GPUs talk over PCIe only (NCCL hints, with the widest path between two GPUs and the peer
    path the host read), the profile's and the host's own variables (``extra``), the HF
    token, and whether the Hub client stays offline on the downloaded snapshot
    (``hub_cache``)."""

    venv_path: str
    hf_token: str | None = None
    cache_root: str | None = None
    pcie_only: bool = False
    cuda_home: str | None = None
    offline: bool = False
    hub_cache: str | None = None
    widest_path: str | None = None
    extra: Mapping[str, str] | None = None
    p2p: P2PHint | None = None


def environment(spec: EnvSpec, mask: bool = False) -> dict[str, str]:
    """The service's environment, sorted by name (secrets masked when ``mask``); offline,
    the Hub client never reaches the Hub (the model role put the files there). ``extra``
    goes over the NCCL hints; RenderError when it names a variable the renderer sets
    itself."""
    settings = data.sglang_service().environment
    extra = spec.extra or {}
    clash = sorted(set(extra) & managed_env_names())
    if clash:
        raise RenderError(
            f"environment variables {', '.join(clash)} are set by pyinfra-sglang; a profile's "
            "env and sglang_env must not set them",
            "sglang_env",
        )
    path = [_absolute_path(spec.venv_path, "venv_path").rstrip("/") + "/bin"]
    values = dict(cache_dirs(spec.cache_root))
    if spec.cuda_home:
        home = _absolute_path(spec.cuda_home, "cuda_home").rstrip("/")
        values["CUDA_HOME"] = home
        path.append(home + "/bin")
    values["PATH"] = ":".join([*path, *settings.system_path])
    if spec.pcie_only:
        values.update(settings.nccl_pcie_only)
        values.update(nccl_p2p_env(spec.widest_path, spec.p2p, extra)[0])
    values.update(extra)
    if spec.hf_token:
        values["HF_TOKEN"] = mask_text() if mask else spec.hf_token.strip()
    if spec.offline:
        values["HF_HUB_OFFLINE"] = "1"
    if spec.hub_cache:
        values["HF_HUB_CACHE"] = _absolute_path(spec.hub_cache, "hub_cache")
    return dict(sorted(values.items()))


def render_env(spec: EnvSpec, mask: bool = False) -> str:
    """sglang.env: caches on persistent disk, PATH, NCCL hints on PCIe-only hosts, the
    profile's and the host's own variables, HF_TOKEN, HF_HUB_OFFLINE when the model is served
    from the downloaded snapshot."""
    values = environment(spec, mask)
    note = nccl_p2p_env(spec.widest_path, spec.p2p, spec.extra)[1] if spec.pcie_only else None
    return render_template(
        "sglang.env.j2",
        environment=[(name, _env_value(name, value)) for name, value in values.items()],
        # A comment line like any value: a newline in it would start a variable of its own.
        notes=[check_text(note, "the env file's note on P2P", "sglang_env")] if note else [],
    )


def config_entries(api_key: str | None, mask: bool = False) -> dict[str, str]:
    """The config file's keys (flag names without "--") and YAML-quoted values, sorted."""
    entries: dict[str, str] = {}
    if api_key:
        if control_characters_in(api_key.strip()):
            raise RenderError("the API key has control characters; it cannot go into YAML")
        # JSON strings are YAML strings; quoting also keeps "********" from reading as an alias.
        entries["api-key"] = json.dumps(mask_text() if mask else api_key.strip())
    return dict(sorted(entries.items()))


def render_config_yaml(api_key: str | None, mask: bool = False) -> str:
    """sglang.yaml for ``--config``: the API key; comments only when there is none (SGLang
    reads an empty config file as no settings)."""
    return render_template(
        "sglang-config.yaml.j2", entries=list(config_entries(api_key, mask).items())
    )


@dataclass(frozen=True)
class RouterSpec:
    """Everything the router's files are rendered from. Its own bind address and port; its
    Prometheus listener (``metrics_host`` should be a loopback address); its API key, which
    clients present to it and it presents to the workers; the gateway (``package``: the PyPI
    project, a key of data/sglang_service.toml [router.gateway]) and its ``release``."""

    worker_urls: tuple[str, ...]
    host: str
    port: int
    metrics_host: str
    metrics_port: int
    venv_path: str
    api_key: str | None = None
    policy: str | None = None
    mask: bool = False
    package: str = "sglang-router"
    release: str = "0.3.2"

    @property
    def worker_logins(self) -> bool:
        """Does a worker URL carry a login (``http://user:password@host``)? Then the URLs go
        through the 0600 environment file too, never on the command line."""
        return any(urlsplit(url).username or urlsplit(url).password for url in self.worker_urls)

    @property
    def env_file(self) -> bool:
        """Is there anything for the launcher to read from the environment file?"""
        return bool(self.api_key) or self.worker_logins


def _gateway(package: str) -> Gateway:
    gateways = data.sglang_service().router.gateway
    if package not in gateways:
        raise RenderError(
            f"no command line is known for the router package {package!r} (known: "
            f"{', '.join(sorted(gateways))}; pyinfra_sglang/data/sglang_service.toml "
            "[router.gateway])",
            "sglang_version",
        )
    return gateways[package]


def router_stop_timeout_s() -> int:
    """The router unit's TimeoutStopSec: the gateway's shutdown grace plus a margin, so
    systemd kills it only after the grace it was given ran out."""
    router = data.sglang_service().router
    return int(router.shutdown_grace_s) + int(router.stop_margin_s)


def router_args(spec: RouterSpec) -> list[str]:
    """The gateway's flags (after its subcommand, if any): never the API key, nor worker URLs
    with a login (the launcher adds them in-process from the 0600 environment file; see
    router_exec)."""
    if not spec.worker_urls:
        raise RenderError("the router needs at least one worker URL", "sglang_router_worker_urls")
    router = data.sglang_service().router
    gateway = _gateway(spec.package)
    for url in spec.worker_urls:
        check_text(url, "a worker URL", "sglang_router_worker_urls")
    grace = (
        [router.shutdown_grace_flag, str(router.shutdown_grace_s)]
        if parse_version(spec.release) >= parse_version(gateway.grace_flag_from)
        else []
    )
    workers = [] if spec.worker_logins else [router.worker_urls_flag, *spec.worker_urls]
    return [
        *gateway.subcommand,
        *workers,
        router.policy_flag,
        spec.policy or router.policy,
        router.host_flag,
        str(spec.host),
        router.port_flag,
        str(spec.port),
        router.prometheus_host_flag,
        str(spec.metrics_host),
        router.prometheus_port_flag,
        str(spec.metrics_port),
        *grace,
    ]


def router_launcher(
    package: str = "sglang-router", api_key: bool = True, worker_urls: bool = False
) -> str:
    """The Python code (``python -c``) that starts the router with its API key (and, with
    ``worker_urls``, its worker URLs) taken from the environment (systemd reads them from the
    0600 EnvironmentFile): it removes each variable, adds ``--api-key KEY`` (``--worker-urls
    URL...``) to its own ``sys.argv`` and runs the gateway's module as ``python -m`` would.
    Neither is ever in the process's command line (/proc/PID/cmdline, ps, systemctl status),
    which anyone on the host can read: the gateways' ``main()`` parse ``sys.argv[1:]``
    (sglang-router 0.2.x/0.3.x launch_router, smg's cli.main through smg/__main__.py), and
    neither takes its key any other way (no file, no variable)."""
    router = data.sglang_service().router
    code = ["import os, runpy, sys"]
    if api_key:
        code.append(
            f"sys.argv += [{router.api_key_flag!r}, os.environ.pop({router.api_key_variable!r})]"
        )
    if worker_urls:
        code.append(
            f"sys.argv += [{router.worker_urls_flag!r}, "
            f"*os.environ.pop({router.worker_urls_variable!r}).split()]"
        )
    code.append(
        f"runpy.run_module({_gateway(package).module!r}, run_name='__main__', alter_sys=True)"
    )
    return "; ".join(code)


def router_exec(spec: RouterSpec) -> list[str]:
    """The router's whole command line: the gateway's console script (``smg launch ARGS``)
    or ``python -m MODULE ARGS``; with an API key, ``python -c LAUNCHER ARGS``
    (router_launcher)."""
    bin_dir = _absolute_path(spec.venv_path, "venv_path").rstrip("/") + "/bin/"
    gateway = _gateway(spec.package)
    if spec.env_file:
        launcher = router_launcher(spec.package, bool(spec.api_key), spec.worker_logins)
        program = [bin_dir + "python", "-c", launcher]
    elif gateway.script:
        program = [bin_dir + gateway.script]
    else:
        program = [bin_dir + "python", "-m", gateway.module]
    return [*program, *router_args(spec)]


def router_env_path() -> str:
    return data.sglang_service().router.env_path


def render_router_unit(spec: RouterSpec) -> str:
    """sglang-router.service: the SGLang Model Gateway in front of ``spec.worker_urls``."""
    settings = data.sglang_service()
    return render_template(
        "sglang-router.service.j2",
        description=_systemd_text(
            f"SGLang Model Gateway, {spec.package} {spec.release} ({len(spec.worker_urls)} "
            "worker(s))"
        ),
        worker_count=len(spec.worker_urls),
        env_path=router_env_path() if spec.env_file else None,
        exec_start=exec_start(router_exec(spec)),
        restart_sec=settings.unit.restart_sec,
        timeout_stop_s=router_stop_timeout_s(),
        grace_s=settings.router.shutdown_grace_s,
        limit_nofile=settings.unit.limit_nofile,
        privileged_port=min(spec.port, spec.metrics_port) < 1024,
    )


def render_router_env(spec: RouterSpec) -> str:
    """sglang-router.env (0600): the router's API key and worker URLs with logins, for the
    launcher to read."""
    router = data.sglang_service().router
    lines = []
    if spec.api_key:
        value = mask_text() if spec.mask else spec.api_key.strip()
        lines.append(f"{router.api_key_variable}={_env_value(router.api_key_variable, value)}")
    if spec.worker_logins:
        urls = " ".join(redact(url) if spec.mask else url for url in spec.worker_urls)
        lines.append(
            f"{router.worker_urls_variable}={_env_value(router.worker_urls_variable, urls)}"
        )
    return (
        "# Managed by pyinfra-sglang (pyinfra_sglang/serving/render.py); local edits are "
        "overwritten.\n"
        "# Environment of sglang-router.service (systemd EnvironmentFile); 0600: it holds the\n"
        "# router's secrets (its API key, worker URLs with logins), which its launcher passes\n"
        "# to the router in-process, never on a command line.\n"
        + "".join(f"{line}\n" for line in lines)
    )


def render_router_files(spec: RouterSpec) -> list[RenderedFile]:
    """The router's unit and, with an API key, its 0600 environment file."""
    unit = data.sglang_service().files.router_unit
    files = [RenderedFile(unit.path, render_router_unit(spec), unit.mode)]
    if spec.env_file:
        router = data.sglang_service().router
        files.append(RenderedFile(router.env_path, render_router_env(spec), router.env_mode))
    return files


# --- everything at once ----------------------------------------------------------------


@dataclass(frozen=True)
class Secrets:
    api_key: str | None = None
    hf_token: str | None = None
    router_api_key: str | None = None


@dataclass(frozen=True)
class ServiceSpec:
    """Everything the service's files are rendered from: where the profile runs
    (``placement``) and the deployment's values."""

    placement: Placement
    host: str
    port: int
    venv_path: str
    secrets: Secrets = Secrets()
    cuda_home: str | None = None
    cache_root: str | None = None
    mask: bool = False  # print the mask in place of each secret
    file_paths: Mapping[str, str] | None = None  # kind -> path, over data/sglang_service.toml
    # The Hub model's revision (--revision), and whether to serve it from the downloaded
    # snapshot only (HF_HUB_OFFLINE=1: a restart never reaches the Hub).
    model_revision: str | None = None
    offline: bool = False
    hub_cache: str | None = None  # HF_HUB_CACHE, when not HF_HOME's own hub/ folder
    host_env: Mapping[str, str] = field(default_factory=dict)  # sglang_env: over the profile's


def render_service_files(spec: ServiceSpec) -> list[RenderedFile]:
    """The unit, the env file and the config file, in that order, for the profile as placed
    (the argv's own checks: flags for the release, multi-node values, paths)."""
    placement = spec.placement
    profile, gpus = placement.profile, placement.gpus
    files = data.sglang_service().files.model_dump()  # a copy: spec.file_paths go over it
    for key, path in (spec.file_paths or {}).items():
        files[key]["path"] = path
    argv = server_args(
        placement,
        spec.host,
        spec.port,
        config_path=files["config"]["path"],
        revision=spec.model_revision,
    )
    env = render_env(
        EnvSpec(
            venv_path=spec.venv_path,
            hf_token=spec.secrets.hf_token,
            cache_root=spec.cache_root,
            pcie_only=gpus.pcie_only,
            cuda_home=spec.cuda_home,
            offline=spec.offline,
            hub_cache=spec.hub_cache,
            widest_path=gpus.widest_path,
            extra={**profile.env, **spec.host_env},
            p2p=p2p_hint(gpus.peer) if gpus.peer is not None else None,
        ),
        spec.mask,
    )
    contents = {
        "unit": render_unit(
            profile,
            argv,
            placement.sglang_version,
            spec.venv_path,
            files["env"]["path"],
            cache_root=spec.cache_root,
        ),
        "env": env,
        "config": render_config_yaml(spec.secrets.api_key, spec.mask),
    }
    return [
        RenderedFile(files[key]["path"], text, files[key]["mode"]) for key, text in contents.items()
    ]
