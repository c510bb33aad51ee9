"""The SGLang server's watchdog (inventory ``sglang_watchdog``), part of the SGLang service
role: a systemd timer that runs the decode check on loopback every
``sglang_watchdog_interval_s`` and restarts the server after ``sglang_watchdog_failures``
failures in a row, at most ``sglang_watchdog_max_restarts_per_hour`` times an hour
(pyinfra_sglang/host_programs/watchdog.py does the checking and restarting on the host; its
files are rendered by pyinfra_sglang/serving/watchdog.py). Off: whatever an earlier run left is
removed.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import shlex

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from checks.facts import FileDigests, read_once
from pyinfra_sglang import data
from pyinfra_sglang.serving.render import RenderedFile
from pyinfra_sglang.serving.watchdog import all_paths, service_unit, state_dir, timer_unit


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@operation()
def sglang_watchdog(files: tuple[RenderedFile, ...]):
    """The watchdog's programs and units in place, its timer enabled and running; a no-op when
    the host holds exactly these files (compared by sha256) and the timer runs. Changed units
    are reloaded and the timer restarted (its interval counts from then); changed programs
    need nothing more (each run starts them afresh).

    + files: the watchdog's files (pyinfra_sglang/serving/watchdog.py ``watchdog_files``)
    """
    timer = timer_unit()
    current = read_once(host, FileDigests, paths=[f.path for f in files])
    changed = [f for f in files if current.get(f.path) != _digest(f.content)]
    # Every loaded unit's state (one read for the roles' units). A timer not loaded is not
    # running; whether it is enabled then changes nothing below.
    running = read_once(host, SystemdStatus).get(timer, False)
    enabled = read_once(host, SystemdEnabled).get(timer, False)
    if not changed and running and enabled:
        host.noop(f"{timer} runs the rendered watchdog")
        return
    folders = sorted({posixpath.dirname(f.path) for f in changed})
    if folders:
        yield StringCommand("install", "-d", "-m", "755", *(shlex.quote(d) for d in folders))
    for rendered in changed:
        yield FileUploadCommand(io.BytesIO(rendered.content.encode()), rendered.path)
        yield StringCommand(
            "chown",
            "root:root",
            shlex.quote(rendered.path),
            "&&",
            "chmod",
            rendered.mode,
            shlex.quote(rendered.path),
        )
    units_changed = any(f.path.endswith((".service", ".timer")) for f in changed)
    if units_changed:
        yield "systemctl daemon-reload"
    yield StringCommand("systemctl", "enable", shlex.quote(timer))
    # A changed interval takes effect from a restart of the timer.
    yield StringCommand(
        "systemctl", "restart" if units_changed or not running else "start", shlex.quote(timer)
    )


@operation()
def sglang_watchdog_removed():
    """No watchdog: its timer stopped and disabled, its programs, units and state removed; a
    no-op when none of them is there."""
    digests = read_once(host, FileDigests, paths=all_paths())
    if not any(digests.values()):
        host.noop("no watchdog (sglang_watchdog is off)")
        return
    q = shlex.quote
    settings = data.watchdog()
    yield (
        f"systemctl disable --now {q(timer_unit())} 2>/dev/null; "
        f"systemctl stop {q(service_unit())} 2>/dev/null; "
        f"rm -f {' '.join(q(p) for p in all_paths())}; "
        f"rmdir {q(settings.program.dir)} {q(state_dir())} 2>/dev/null; "
        "systemctl daemon-reload"
    )
