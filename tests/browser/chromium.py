"""Drive Debian's Chromium headless: render a local page to a PNG, its DOM, its console.

Chromium comes from the distribution's packages (scripts/bootstrap-tests.sh installs
`chromium`).
Each call uses a fresh profile folder and loads only the file given; `--enable-logging=stderr`
makes the renderer print every console message as an ``INFO:CONSOLE`` line, which is how
errors on the page (a script's, a blocked load's) are seen without a DevTools client.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

NAMES = ("chromium", "chromium-browser")
TIMEOUT_S = 60
# "[pid:tid:time:INFO:CONSOLE:12] "message", source: file:///... (12)" (older: CONSOLE(12)).
CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\] (.*)")


def find_chromium() -> str | None:
    return next((path for name in NAMES if (path := shutil.which(name))), None)


def why_not_installable() -> str | None:
    """Why scripts/bootstrap-tests.sh could not install Chromium here, or None when it could."""
    if os.geteuid() != 0:
        return "Chromium is not installed and this user is not root, so apt cannot install it"
    if shutil.which("apt-get") is None:
        return "Chromium is not installed and this machine has no apt-get to install it with"
    return None


@dataclass(frozen=True)
class Rendered:
    screenshot: Path
    dom: str
    console: list[str]  # every console message the page produced
    stderr: str


def _chromium(binary: str, profile: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def render(binary: str, page: Path, screenshot: Path, width: int, height: int) -> Rendered:
    """``page`` rendered at ``width`` x ``height`` into ``screenshot``, and its DOM after load;
    AssertionError with Chromium's output when it writes no screenshot."""
    url = page.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        shot = _chromium(
            binary, profile, f"--window-size={width},{height}", f"--screenshot={screenshot}", url
        )
    assert screenshot.is_file(), f"Chromium wrote no screenshot of {url}: {shot.stderr[-2000:]}"
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        dom = _chromium(binary, profile, "--dump-dom", url)
    stderr = shot.stderr + dom.stderr
    console = [m.group(1) for line in stderr.splitlines() if (m := CONSOLE.search(line))]
    return Rendered(screenshot, dom.stdout, console, stderr)
