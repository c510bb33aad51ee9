"""The watchdog's files on a host (roles/sglang_watchdog.py): its host programs, its oneshot
service and its timer, rendered from the inventory (``sglang_watchdog*``) and
data/watchdog.toml. Pure: reads no host."""

from __future__ import annotations

import posixpath

from pyinfra_sglang import data
from pyinfra_sglang.config import HostConfig
from pyinfra_sglang.host_programs import program_path
from pyinfra_sglang.serving.host_profile import host_profile
from pyinfra_sglang.serving.render import RenderedFile, exec_start
from pyinfra_sglang.serving.service_files import UNIT_NAME, server_url, service_file_path
from pyinfra_sglang.templating import render_template

PYTHON = "/usr/bin/python3"
# Beyond the check, the drain and the start: systemd's own steps.
TIMEOUT_MARGIN_S = 60


def service_unit() -> str:
    return posixpath.basename(data.watchdog().units.service)


def timer_unit() -> str:
    return posixpath.basename(data.watchdog().units.timer)


def state_path() -> str:
    state = data.watchdog().state
    return f"/var/lib/{state.directory}/{state.file}"


def state_dir() -> str:
    return posixpath.dirname(state_path())


def program_files() -> tuple[RenderedFile, ...]:
    """The watchdog program and the siblings it imports, as shipped."""
    program = data.watchdog().program
    return tuple(
        RenderedFile(f"{program.dir}/{name}", program_path(name).read_text(), "644")
        for name in (program.main, *program.beside)
    )


def watchdog_argv(config: HostConfig) -> list[str]:
    """The watchdog's command line: settings only, never a secret (the API key is read on
    the host from the service's config file)."""
    settings = data.watchdog()
    url = server_url(config)
    guards = [service_file_path(kind) for kind in ("unit", "env", "config")]
    return [
        PYTHON,
        f"{settings.program.dir}/{settings.program.main}",
        *("--unit", UNIT_NAME),
        *("--url", url),
        *("--health-url", f"{url}/health"),
        *(("--api-key-file", service_file_path("config")) if config.sglang_api_key_file else ()),
        *("--expect", settings.check.expect),
        *("--timeout", str(config.sglang_watchdog_timeout_s)),
        *("--failures", str(config.sglang_watchdog_failures)),
        *("--max-restarts-per-hour", str(config.sglang_watchdog_max_restarts_per_hour)),
        *("--start-timeout", str(host_profile(config).start_timeout_s)),
        *("--state", state_path()),
        *("--history", str(settings.state.history)),
        *[word for path in guards for word in ("--guard", path)],
    ]


def unit_files(config: HostConfig) -> tuple[RenderedFile, ...]:
    """The watchdog's service and timer."""
    settings = data.watchdog()
    profile = host_profile(config)
    context = {
        "server_unit": UNIT_NAME,
        "service_unit": service_unit(),
        "timer_unit": timer_unit(),
        "failures": config.sglang_watchdog_failures,
        "max_restarts": config.sglang_watchdog_max_restarts_per_hour,
        "interval_s": config.sglang_watchdog_interval_s,
        "accuracy_s": settings.check.accuracy_s,
        "syslog_identifier": service_unit().removesuffix(".service"),
        "state_directory": settings.state.directory,
    }
    service = render_template(
        "sglang-watchdog.service.j2",
        exec_start=exec_start(watchdog_argv(config)),
        timeout_start_s=config.sglang_watchdog_timeout_s
        + profile.drain_timeout_s
        + profile.start_timeout_s
        + TIMEOUT_MARGIN_S,
        **context,
    )
    timer = render_template("sglang-watchdog.timer.j2", **context)
    return (
        RenderedFile(settings.units.service, service, "644"),
        RenderedFile(settings.units.timer, timer, "644"),
    )


def watchdog_files(config: HostConfig) -> tuple[RenderedFile, ...]:
    """Every file the watchdog needs on the host: programs first, then its units."""
    return program_files() + unit_files(config)


def all_paths() -> list[str]:
    """Every path the watchdog may have left on a host (for its removal)."""
    settings = data.watchdog()
    program = settings.program
    return [
        *(f"{program.dir}/{name}" for name in (program.main, *program.beside)),
        settings.units.service,
        settings.units.timer,
        state_path(),
    ]
