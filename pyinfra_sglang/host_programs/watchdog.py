"""The SGLang server's watchdog, run on the host by a systemd timer (roles/sglang_watchdog.py).

A server can hang while it looks alive: ``/health`` answers 200 while generation never
returns (sgl-project/sglang #6624, #4191). Each run asks the server the decode check's
question on loopback (decode_client.py, beside this file), with the API key read from the
service's own root-only config file (api_key.py): never on a command line, in the
environment or in the journal. A pass clears the count; after ``--failures`` failed checks in
a row it restarts the server as a deploy does (roles/service_apply.py): ``systemctl restart``
(the unit's stop drains the requests in flight, KillMode=mixed, TimeoutStopSec), then waits
for ``GET /health`` = 200 up to the profile's start timeout by the same rules (a crash fails
at once; a start systemd itself could not set up, exit statuses 200-243, is left to the
unit's Restart= twice). The deploy's rollback puts back the files of a change that did not
come up; a watchdog restart changes no file, so there is nothing to roll back: a server that
does not come back is left to an operator, and said so. The deploy runs from the controller,
so this program carries its host-side rules (``unit_failure``, ``setup_failure``: the deploy
imports them from here). While a deploy is changing the service (its ``.new``,
``.last-good`` or ``.absent`` files beside the service's) the watchdog checks nothing.

A failed check counts only when the server is neither loading nor working:

- *loading*: while the unit has been active (systemd's ActiveEnterTimestampMonotonic) for
  less than ``--start-timeout`` and no check has got an answer since, a refused connection
  or SGLang's 503 is the load, not a failure (SGLang binds its port only once the model is
  loaded, and answers 503 while it warms up: http_server.py, 0.5.17). Once a check got an
  answer, a 503 is a server gone bad (SGLang's /health answers 503 also when its one-token
  generation gets nothing back within 20 s);
- *working*: the server's token counter on ``/metrics`` (``sglang:realtime_tokens_total``,
  which every prefill chunk and decode step moves from 0.5.17 on; before it the prompt and
  generation totals) is read before and after the check; when a check timed out (or /health
  answered 503) while the counter moved by more than the check's own tokens, the server is
  saturated, not hung (a long prefill starves SGLang's own ``/health``: sgl-project/sglang
  #22511). A wrong or empty answer counts whatever the load. A server whose counter cannot
  be read is judged by the check alone, and the journal line says so.

At most ``--max-restarts-per-hour`` restarts in any hour: beyond them it restarts nothing
and leaves a journal line that says so, every run, until the oldest restart is an hour old.

Its state (failures in a row, the last check, the last restarts with their times and
outcomes) is a JSON file, root's 0600, in a 0700 folder under /var/lib (the unit's
StateDirectory=); the audit reads it, through ``check_state`` as this program does. A field of
it that is not what this program writes (a wrong type, a count out of range, a time that is
not finite or lies ahead of the clock: the clock went back) is read as absent, with a warning
line that names the file and the field: a state file cannot crash the watchdog, nor hold its
restarts off for years. Lines go to stdout with sd-daemon(3) priority prefixes
(``<3>`` error, ``<4>`` warning, ``<5>`` notice, ``<6>`` info), which journald reads.

Standard library only, Python 3.9+, no imports from pyinfra-sglang but its siblings.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

try:  # imported as part of pyinfra_sglang (the deploy, the tests)
    from .api_key import read_api_key
    from .decode_client import DEFAULT_EXPECT, DEFAULT_MAX_TOKENS, MASK, decode_check, safe_text
except ImportError:  # run as a script on a host, beside them
    from api_key import read_api_key  # type: ignore[no-redef]
    from decode_client import (  # type: ignore[no-redef]
        DEFAULT_EXPECT,
        DEFAULT_MAX_TOKENS,
        MASK,
        decode_check,
        safe_text,
    )

HOUR_S = 3600.0
HEALTH_POLL_S = 2.0
RESTART_POLL_S = 1.0
MESSAGE_CHARS = 300
# systemd's own exit statuses (systemd.exec(5), "Process Exit Codes": 200 EXIT_CHDIR ..
# 243 EXIT_CREDENTIALS, e.g. 219/CGROUP) mean the server never ran: systemd failed to set the
# process up. The unit's Restart= tries again after RestartSec, so a wait gives it that many
# tries. The deploy's health wait (roles/service_apply.py) uses these same rules.
SYSTEMD_SETUP_STATUSES = range(200, 244)
SETUP_FAILURES_TOLERATED = 2
# The markers a deploy leaves beside a service file while it changes it.
DEPLOY_MARKERS = (".new", ".last-good", ".absent")
# What the state file may hold (check_state): the program writes a few kB; a time may be this
# far ahead of the clock that reads it (clocks of a host and its controller, NTP steps);
# failures in a row stay far below this (one a timer interval, reset by each restart).
STATE_MAX_BYTES = 1 << 20
CLOCK_SKEW_S = 60.0
MAX_COUNT = 10**9
MAX_TEXT = 1000
MAX_RESTARTS_READ = 1000
INT_DIGITS_READ = 30
PROBLEMS_SHOWN = 3
# A loading server: its port is not bound yet, or it answers 503 while it warms up.
STARTING_REASONS = ("connection-refused", "loading")
# Reasons of a check that got no answer from the model; any other is an answer.
UNANSWERED = (*STARTING_REASONS, "timeout")
# The token counters of /metrics that show work, each summed over its series: every prefill
# chunk and decode step (0.5.17 on); where a server has none, finished requests' prompt and
# generated tokens (one or the other: they count the same tokens).
REALTIME_COUNTER = "sglang:realtime_tokens_total"
FINISHED_COUNTERS = ("sglang:prompt_tokens_total", "sglang:generation_tokens_total")
PROGRESS_COUNTERS = (REALTIME_COUNTER, *FINISHED_COUNTERS)
# A check that timed out, or SGLang's /health 503 (its one-token generation got nothing back
# within 20 s, as under long prefills: sgl-project/sglang #22511), may be a queue behind
# other work; any other failure is the server's answer.
BUSY_REASONS = ("timeout", "loading")
# The check's own tokens, which must not pass for other work: two answers (streamed, then
# not) of up to DEFAULT_MAX_TOKENS each, with their prompts.
OWN_TOKENS = 2 * (DEFAULT_MAX_TOKENS + 512)
METRICS_MAX_BYTES = 16 << 20
METRICS_TIMEOUT_S = 10.0


# --- the deploy's rules for a unit that is starting -------------------------------------


def unit_failure(status: dict) -> str | None:
    """Why the unit is down (None while it runs or starts): Restart=on-failure turns a
    crash into "activating (auto-restart)", never "failed"."""
    down = status.get("ActiveState") in ("failed", "inactive")
    if down or status.get("SubState") == "auto-restart":
        return f"{status.get('ActiveState')}/{status.get('SubState')}"
    return None


def setup_failure(status: dict) -> bool:
    """The unit waits to be restarted after systemd failed to set its process up."""
    exit_status = str(status.get("ExecMainStatus", ""))
    return (
        status.get("SubState") == "auto-restart"
        and exit_status.isdigit()
        and int(exit_status) in SYSTEMD_SETUP_STATUSES
    )


# --- the state file ---------------------------------------------------------------------


def new_state() -> dict:
    # answered_activation: the unit's ActiveEnterTimestampMonotonic (µs) when a check last
    # got an answer: that start has loaded, so its 503s are no longer the load.
    return {
        "failures": 0,
        "last_check": None,
        "restarts": [],
        "held": None,
        "answered_activation": None,
    }


class _LongInt:
    """An integer of too many digits for the state, as json reads it here: never converted
    (a 10**6-digit int takes seconds where Python has no int_max_str_digits, before 3.9.14)."""

    def __init__(self, digits: str):
        self.digits = len(digits.lstrip("-"))


def _parse_int(digits: str) -> object:
    return int(digits) if len(digits) <= INT_DIGITS_READ else _LongInt(digits)


def _shown(value: object) -> str:
    """``value`` in a warning, bounded: no nested value is written out."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, _LongInt):
        return f"an integer of {value.digits} digits"
    if isinstance(value, int):
        return (
            str(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
        )
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return ("-Infinity" if value < 0 else "Infinity") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def _ahead(seconds: float) -> str:
    if seconds < 2 * 86400:
        return f"{seconds:.0f} s"
    return (
        f"{seconds / 86400:.0f} days"
        if seconds < 365 * 86400
        else f"{seconds / 31557600:.3g} years"
    )


def _time(value: object, now: float | None, clock: str, ahead_s: float = 0.0) -> str | None:
    """Why ``value`` is no time the watchdog wrote (None when it is one): a finite number of
    seconds since 1970, at most CLOCK_SKEW_S (plus ``ahead_s``) after ``now``, when known."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"is {_shown(value)}, not a time in seconds"
    try:
        seconds = float(value)
    except OverflowError:
        return f"is {_shown(value)}, not a time in seconds"
    if not math.isfinite(seconds):
        return f"is {_shown(value)}, not a finite time"
    if seconds < 0:
        return f"is {_shown(value)}, before 1970"
    if now is not None and seconds > now + ahead_s + CLOCK_SKEW_S:
        return f"is {_ahead(seconds - now)} after {clock} (did the clock go back?)"
    return None


def _text(value: object) -> bool:
    return value is None or (isinstance(value, str) and len(value) <= MAX_TEXT)


def _duration(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return 0 <= float(value) < 1e9
    except OverflowError:
        return False


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _last_check(value: object, now: float | None, clock: str) -> tuple[dict | None, str | None]:
    if value is None:
        return None, None
    if not isinstance(value, dict):
        return None, f"last_check is {_shown(value)}, not an object"
    why = _time(value.get("at"), now, clock)
    if why:
        return None, f"last_check.at {why}"
    if value.get("ok") not in (True, False, None):
        return None, f"last_check.ok is {_shown(value.get('ok'))}, not true, false or null"
    if not _text(value.get("reason")):
        return None, f"last_check.reason is {_shown(value.get('reason'))}, not a short text"
    return {"at": float(value["at"]), "ok": value.get("ok"), "reason": value.get("reason")}, None


def _restart(
    value: object, index: int, now: float | None, clock: str
) -> tuple[dict | None, list[str]]:
    """The restart entry ``value`` rebuilt from what it holds, with what could not be used;
    None when its time cannot be: a restart is counted by its time."""
    where = f"restarts[{index}]"
    if not isinstance(value, dict):
        return None, [f"{where} is {_shown(value)}, not an object: left out"]
    why = _time(value.get("at"), now, clock)
    if why:
        return None, [f"{where}.at {why}: left out"]
    entry = {"at": float(value["at"])}
    problems: list[str] = []
    for key in ("reason", "outcome"):
        entry[key] = value.get(key)
        if not _text(entry[key]):
            problems.append(
                f"{where}.{key} is {_shown(entry[key])}, not a short text: read as null"
            )
            entry[key] = None
    took = value.get("took_s")
    entry["took_s"] = None
    if _duration(took):
        entry["took_s"] = None if took is None else float(took)  # type: ignore[arg-type]
    else:
        problems.append(f"{where}.took_s is {_shown(took)}, not seconds: read as null")
    return entry, problems


def _held(value: object, now: float | None, clock: str) -> tuple[dict | None, str | None]:
    if value is None:
        return None, None
    if not isinstance(value, dict):
        return None, f"held is {_shown(value)}, not an object"
    for key, ahead_s in (("since", 0.0), ("until", HOUR_S)):
        why = _time(value.get(key), now, clock, ahead_s)
        if why:
            return None, f"held.{key} {why}"
    return {"since": float(value["since"]), "until": float(value["until"])}, None


def check_state(
    value: object, now: float | None, clock: str = "this host's clock"
) -> tuple[dict, list[tuple[str, str]]]:
    """The state the JSON ``value`` holds, every field checked, and the problems: (the field,
    what is wrong with it and how it was read); a field that is not what this program writes
    is read as absent, as in a fresh state. Times may not be later than ``now`` (beyond
    CLOCK_SKEW_S; a hold ends at most an hour after); ``now`` None (the audit, which judges a
    record again later) checks them against the state's own last check instead."""
    state = new_state()
    if not isinstance(value, dict):
        return state, [("top level", f"its top level is {_shown(value)}, not an object")]
    problems: list[tuple[str, str]] = []
    failures = value.get("failures", 0)
    if _count(failures):
        state["failures"] = failures
    else:
        why = f"is {_shown(failures)}, not a count from 0 to {MAX_COUNT}: read as 0"
        problems.append(("failures", f"failures {why}"))
    state["last_check"], why = _last_check(value.get("last_check"), now, clock)
    if why:
        problems.append(("last_check", f"{why}: read as absent"))
    if now is None and state["last_check"] is not None:
        now, clock = state["last_check"]["at"], "the watchdog's last check"
    restarts = value.get("restarts", [])
    if not isinstance(restarts, list):
        problems.append(("restarts", f"restarts is {_shown(restarts)}, not a list: read as none"))
        restarts = []
    if len(restarts) > MAX_RESTARTS_READ:
        problems.append(
            (
                "restarts",
                f"restarts holds {len(restarts)} entries: the first "
                f"{len(restarts) - MAX_RESTARTS_READ} left out",
            )
        )
    first = max(0, len(restarts) - MAX_RESTARTS_READ)
    for index, item in enumerate(restarts[first:], start=first):
        entry, wrong = _restart(item, index, now, clock)
        if entry is not None:
            state["restarts"].append(entry)
        problems += [("restarts", why) for why in wrong]
    state["held"], why = _held(value.get("held"), now, clock)
    if why:
        problems.append(("held", f"{why}: read as absent"))
    answered = value.get("answered_activation")
    if answered is None or _stamp(answered):
        state["answered_activation"] = answered
    else:
        problems.append(
            (
                "answered_activation",
                f"answered_activation is {_shown(answered)}, not a systemd timestamp: "
                "read as absent",
            )
        )
    return state, problems


def _stamp(value: object) -> bool:
    """A systemd monotonic timestamp in µs (a 64-bit count)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def problem_lines(problems: list[tuple[str, str]]) -> list[str]:
    """One line a field, its first few problems and how many more."""
    fields: dict[str, list[str]] = {}
    for field, why in problems:
        fields.setdefault(field, []).append(why)
    lines = []
    for whys in fields.values():
        more = len(whys) - PROBLEMS_SHOWN
        lines.append("; ".join(whys[:PROBLEMS_SHOWN]) + (f"; and {more} more" if more > 0 else ""))
    return lines


def parse_state(data: bytes) -> tuple[object, str | None]:
    """The JSON value of a state file's bytes, or why there is none: empty, too large, not
    UTF-8, not JSON or nested too deep."""
    if len(data) > STATE_MAX_BYTES:
        return None, f"is larger than {STATE_MAX_BYTES} bytes"
    if not data.strip():
        return None, "is empty"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"is not UTF-8 (byte {error.start})"
    try:
        return json.loads(text, parse_int=_parse_int), None
    except RecursionError:
        return None, "nests too deeply to be read"
    except ValueError as error:
        return None, f"is not JSON ({str(error)[:MESSAGE_CHARS]})"


def load_state(path: str, now: float | None = None) -> dict:
    """The state in ``path``, checked (check_state): a field that cannot be used is read as
    absent, said in one warning line a field; a fresh state when there is no file (the first
    run: said nothing) or none of it can be read (said)."""
    try:
        with open(path, "rb") as file:
            value, unreadable = parse_state(file.read(STATE_MAX_BYTES + 1))
    except FileNotFoundError:
        return new_state()
    except OSError as error:
        value, unreadable = None, f"cannot be read ({error.strerror or error})"
    if unreadable:
        say(4, f"watchdog state {path}: {unreadable}: starting from a fresh state")
        return new_state()
    state, problems = check_state(value, now)
    for line in problem_lines(problems):
        fresh = "; starting from a fresh state" if line.startswith("its top level") else ""
        say(4, f"watchdog state {path}: {line}{fresh}")
    return state


def save_state(path: str, state: dict) -> None:
    """Written whole through a 0600 file beside it, then moved over it."""
    staging = path + ".new"
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(state, file, indent=1, sort_keys=True)
        file.write("\n")
    os.replace(staging, path)


def recent_restarts(state: dict, now: float) -> list[dict]:
    """The restarts of the last hour (a checked state: each has its time)."""
    return [entry for entry in state["restarts"] if now - entry["at"] < HOUR_S]


# --- the host ---------------------------------------------------------------------------


def say(priority: int, message: str) -> None:
    print(f"<{priority}>{safe_text(message)}", flush=True)


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(epoch))


def systemctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["systemctl", *args], capture_output=True, text=True, check=False, timeout=None
    )


def unit_status(unit: str) -> dict:
    shown = systemctl(
        "show",
        "-p",
        "ActiveState",
        "-p",
        "SubState",
        "-p",
        "ExecMainStatus",
        "-p",
        "NRestarts",
        unit,
    ).stdout
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def deploy_in_progress(guarded: list[str]) -> str | None:
    """A marker file a deploy leaves while it changes the service, when one exists."""
    for path in guarded:
        for suffix in DEPLOY_MARKERS:
            if os.path.exists(path + suffix):
                return path + suffix
    return None


def health_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, ValueError):
        return None


def monotonic() -> float:
    return time.monotonic()


def active_since_us(unit: str) -> int | None:
    """When ``unit`` last became active, on systemd's monotonic clock (µs; the clock of
    time.monotonic(): no wall-clock step moves it); None when systemd does not say."""
    shown = systemctl("show", "-p", "ActiveEnterTimestampMonotonic", "--value", unit).stdout
    value = shown.strip()
    if not value.isdigit() or len(value) > 19 or int(value) == 0:
        return None
    return int(value)


def seconds_since(stamp_us: int) -> float:
    return max(0.0, monotonic() - stamp_us / 1e6)


def loading_for_s(state: dict, stamp_us: int | None) -> float | None:
    """How long the server has been loading: active since ``stamp_us`` without a check that
    got an answer since; None once one did (or systemd gives no time): no grace then."""
    if stamp_us is None or state.get("answered_activation") == stamp_us:
        return None
    return seconds_since(stamp_us)


def parse_progress(text: str) -> float | None:
    """The server's token counter in a Prometheus text page: REALTIME_COUNTER summed over its
    series, else the FINISHED_COUNTERS; None when the page holds none of them (metrics off,
    another server)."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        if rest:
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        if name.strip() not in PROGRESS_COUNTERS:
            continue
        fields = rest.split()
        try:
            value = float(fields[0]) if fields else math.nan
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            sums[name.strip()] = sums.get(name.strip(), 0.0) + value
    if REALTIME_COUNTER in sums:
        return sums[REALTIME_COUNTER]
    finished = [sums[name] for name in FINISHED_COUNTERS if name in sums]
    return sum(finished) if finished else None


def read_progress(url: str, key: str | None) -> tuple[float | None, str]:
    """(the server's token counters, or None) and why none, from ``url``/metrics (with the
    API key: SGLang guards /metrics with it unless told otherwise)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(f"{url}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=METRICS_TIMEOUT_S) as response:
            body = response.read(METRICS_MAX_BYTES + 1)
    except urllib.error.HTTPError as error:
        return None, f"/metrics answered {error.code}"
    except (OSError, ValueError) as error:
        return None, f"/metrics could not be read ({type(error).__name__})"
    if len(body) > METRICS_MAX_BYTES:
        return None, f"/metrics is larger than {METRICS_MAX_BYTES} bytes"
    progress = parse_progress(body.decode("utf-8", "replace"))
    if progress is None:
        return None, f"/metrics holds none of {', '.join(PROGRESS_COUNTERS)}"
    return progress, ""


def not_counted(
    reason: str,
    loading_s: float | None,
    start_timeout: float,
    before: tuple[float | None, str],
    after: tuple[float | None, str],
) -> tuple[str, str] | None:
    """(state reason, journal line) when a failed check with ``reason`` is not a failure: the
    server is loading (active for ``loading_s``, less than its start timeout, with no check
    answered since, and refusing or answering 503) or working (a timeout or a 503 while its
    token counter moved by more than the check's own tokens). None: it counts."""
    if reason in STARTING_REASONS and loading_s is not None and loading_s < start_timeout:
        return "starting", (
            f"decode check not counted: the server is loading ({reason}; active for "
            f"{loading_s:.0f} s of its {start_timeout:.0f} s start timeout)"
        )
    (was, _), (now, _) = before, after
    if reason not in BUSY_REASONS:
        return None
    if was is not None and now is not None and now - was > OWN_TOKENS:
        return "busy", (
            f"decode check not counted ({reason}): the server is working, {now - was:.0f} "
            f"tokens processed during the check (its /metrics counters; the check's own "
            f"are at most {OWN_TOKENS})"
        )
    return None


def unread_progress(before: tuple[float | None, str], after: tuple[float | None, str]) -> str:
    """What the journal line of a counted failure says about the counters."""
    (was, why_before), (now, why_after) = before, after
    if was is None or now is None:
        return f"; whether the server was working is unknown: {why_before or why_after}"
    if now < was:
        return "; its /metrics counters went back (the server restarted during the check)"
    return f"; {now - was:.0f} tokens processed during the check"


def wait_healthy(unit: str, health_url: str, timeout_s: float) -> str | None:
    """None once ``health_url`` answers 200; else why not: the unit failed (a setup failure
    is waited out twice), or ``timeout_s`` passed. The deploy's wait, on the host."""
    deadline = monotonic() + timeout_s
    tolerated = SETUP_FAILURES_TOLERATED
    while monotonic() < deadline:
        status = unit_status(unit)
        failure = unit_failure(status)
        if failure and tolerated and setup_failure(status):
            tolerated -= 1
            say(
                4,
                f"{unit}: systemd could not set its process up (exit status "
                f"{status.get('ExecMainStatus')}); its Restart= tries again",
            )
            restarts = status.get("NRestarts")
            while monotonic() < deadline and unit_status(unit).get("NRestarts") == restarts:
                time.sleep(RESTART_POLL_S)
            continue
        if failure:
            return f"{unit} exited ({failure})"
        if health_status(health_url) == 200:
            return None
        time.sleep(HEALTH_POLL_S)
    return f"{health_url} not healthy after {timeout_s:.0f} s"


# --- one run ----------------------------------------------------------------------------


def restart(args: argparse.Namespace, state: dict, why: str, now: float) -> None:
    """Restart the server as a deploy does and wait for its health; the restart is in the
    state file before it begins, so a watchdog killed during it still counts it."""
    entry = {"at": now, "reason": why, "outcome": None, "took_s": None}
    state["restarts"] = (state["restarts"] + [entry])[-args.history :]
    state["failures"] = 0
    state["held"] = None
    save_state(args.state, state)
    say(
        5,
        f"restarting {args.unit}: {args.failures} decode checks failed in a row ({why}); its "
        f"stop drains the requests in flight, then up to {args.start_timeout:.0f} s for "
        f"{args.health_url}",
    )
    started = monotonic()
    done = systemctl("restart", args.unit)
    problem = (
        f"systemctl restart {args.unit} failed: {done.stderr.strip()[:MESSAGE_CHARS]}"
        if done.returncode != 0
        else wait_healthy(args.unit, args.health_url, args.start_timeout)
    )
    entry["took_s"] = round(monotonic() - started, 1)
    entry["outcome"] = "healthy" if problem is None else problem
    save_state(args.state, state)
    if problem is None:
        say(5, f"{args.unit} is healthy again after the restart ({entry['took_s']:.0f} s)")
    else:
        say(
            3,
            f"{args.unit} did not come back after the watchdog's restart: {problem}. Nothing "
            f"changed in its files, so there is no earlier version to roll back to: look at "
            f"journalctl -u {args.unit}",
        )


def run_once(args: argparse.Namespace, now: float | None = None) -> int:
    now = time.time() if now is None else now
    state = load_state(args.state, now)
    busy = deploy_in_progress(args.guard)
    if busy:
        say(6, f"not checked: a deploy is changing {args.unit} ({busy} exists)")
        return 0
    active = systemctl("is-active", args.unit).stdout.strip() or "unknown"
    if active != "active":
        state["last_check"] = {"at": now, "ok": None, "reason": f"not-{active}"}
        save_state(args.state, state)
        say(6, f"not checked: {args.unit} is {active} (systemd and the deploy start it)")
        return 0
    key = None
    if args.api_key_file:
        try:
            key = read_api_key(args.api_key_file)
        except (OSError, ValueError) as error:
            say(3, f"cannot read the API key from {args.api_key_file}: {error}")
            return 1
    stamp = active_since_us(args.unit)
    before = read_progress(args.url, key)
    result = decode_check(args.url, expect=args.expect, api_key=key, timeout=args.timeout)
    reason = result["reason"]
    loading_s = loading_for_s(state, stamp)
    if reason not in UNANSWERED:
        state["answered_activation"] = stamp
    # decode_check masks the key in what it returns; masked here again all the same.
    message = str(result["message"] or "")
    if key:
        message = message.replace(key, MASK)
    message = message[:MESSAGE_CHARS]
    state["last_check"] = {"at": now, "ok": result["ok"], "reason": reason}
    if result["ok"]:
        if state["failures"]:
            say(5, f"decode check passed again after {state['failures']} failed in a row")
        else:
            say(6, f"decode check passed (ttft {result['ttft_s'] or 0:.3f} s)")
        state["failures"] = 0
        state["held"] = None
        save_state(args.state, state)
        return 0
    after = read_progress(args.url, key)
    excused = not_counted(reason, loading_s, args.start_timeout, before, after)
    if excused:
        state["last_check"] = {"at": now, "ok": None, "reason": excused[0]}
        save_state(args.state, state)
        say(5, f"{excused[1]}: {message}")
        return 0
    state["failures"] = int(state["failures"]) + 1
    say(
        4,
        f"decode check failed ({reason}), {state['failures']} of {args.failures} in a row"
        f"{unread_progress(before, after)}: {message}",
    )
    if state["failures"] < args.failures:
        save_state(args.state, state)
        return 0
    recent = recent_restarts(state, now)
    if len(recent) >= args.max_restarts_per_hour:
        allowed = min(entry["at"] for entry in recent) + HOUR_S
        state["held"] = {"since": (state["held"] or {}).get("since", now), "until": allowed}
        save_state(args.state, state)
        say(
            3,
            f"NOT restarting {args.unit}: the watchdog restarted it {len(recent)} times in the "
            f"last hour, its limit (sglang_watchdog_max_restarts_per_hour "
            f"{args.max_restarts_per_hour}); it restarts nothing before {_when(allowed)}. "
            f"The server fails its decode check ({reason}): look at journalctl -u {args.unit}",
        )
        return 0
    restart(args, state, reason, now)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="watchdog.py", description=__doc__.splitlines()[0])
    parser.add_argument("--unit", required=True, help="the server's unit, e.g. sglang.service")
    parser.add_argument("--url", required=True, help="the server's base URL on loopback")
    parser.add_argument("--health-url", required=True, help="its /health URL")
    parser.add_argument("--api-key-file", default=None, help="the service's config file")
    parser.add_argument("--expect", default=DEFAULT_EXPECT)
    parser.add_argument("--timeout", type=float, required=True, help="one check, seconds")
    parser.add_argument("--failures", type=int, required=True, help="failures in a row")
    parser.add_argument("--max-restarts-per-hour", type=int, required=True)
    parser.add_argument("--start-timeout", type=float, required=True, help="health wait, s")
    parser.add_argument("--state", required=True, help="the state file")
    parser.add_argument("--history", type=int, default=10, help="restarts kept in the state")
    parser.add_argument(
        "--guard",
        action="append",
        default=[],
        help="a service file whose deploy markers (.new, .last-good, .absent) pause the check",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return run_once(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
