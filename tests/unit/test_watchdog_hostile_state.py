"""Issue 46 (robust readers): hostile shapes of the watchdog's state file, through the host
program as its timer runs it (its state read and its restart decision, systemctl and the
decode check replaced by tests/unit/test_watchdog.py's recorders) and through the audit's
judge. Neither may raise; each says once which file and which field it could not use and
reads that field as absent; the audit gives no "ok" about what it could not read; and restart
times in the future (a clock that went back) hold no restart off."""

from __future__ import annotations

import ast
import json
import math
import sys

import pytest

from pyinfra_sglang.audit.watchdog import findings_for_watchdog
from pyinfra_sglang.host_programs import program_path
from tests.unit import test_watchdog as base

# The recorders' fixture, bound here so pytest finds it for this module's tests (assigned, not
# imported: see tests/unit/test_decode_check.py).
host = base.host
run = base.run
TIMER = base.TIMER

NOW = 1_800_000_000.0  # 2027-01-15
DECADE_S = 10 * 365 * 86400.0
CHECK = {"at": NOW - 60, "ok": True, "reason": "pass"}
STATE_WARNING = "<4>watchdog state "


def entry(at: object, **over: object) -> dict:
    return {"at": at, "reason": "timeout", "outcome": "healthy", "took_s": 12.0, **over}


# Two restarts within the hour before NOW: the limit (--max-restarts-per-hour 2) is reached.
RECENT = [entry(NOW - 1200), entry(NOW - 600)]


def state_with(**fields: object) -> bytes:
    """A well-formed state with ``fields`` replaced; json.dumps writes NaN and Infinity as
    json.loads reads them back."""
    value = {"failures": 0, "last_check": CHECK, "restarts": [], "held": None}
    value.update(fields)
    return json.dumps(value).encode()


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"a": [value]}
    return value


def case(name, raw, field, restarts=1, clock=False):
    """``raw``: the state file's bytes (None: no file); ``field``: what the one warning line
    names (None: no warning); ``restarts``: those the run makes (its check fails once, in a
    run with --failures 1); ``clock``: the audit sees it only when told the time."""
    return pytest.param(raw, field, restarts, clock, id=name)


CASES = [
    case("missing-file", None, None),
    case("empty-file", b"", "empty"),
    case("not-utf-8", b'{"failures": 0, "last_check": {"reason": "\xff\xfe"}}', "not UTF-8"),
    case("cut-off-json", b'{"failures": 0, "restarts": [', "not JSON"),
    case("nested-too-deep", b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    case("top-level-list", b"[1, 2]", "top level"),
    case("top-level-null", b"null", "top level"),
    case("top-level-string", b'"state"', "top level"),
    case("top-level-number", b"42", "top level"),
    case("top-level-bool", b"true", "top level"),
    case("restarts-dict", state_with(restarts={"at": NOW}), "restarts"),
    case("restarts-string", state_with(restarts="many"), "restarts"),
    case("restart-entries-strings", state_with(restarts=["x", "y"]), "restarts"),
    case("restart-entry-none", state_with(restarts=[None]), "restarts"),
    case("restart-entry-nested", state_with(restarts=[nested(300)]), "restarts"),
    case("restart-at-string", state_with(restarts=[entry("yesterday")]), "restarts"),
    case("restart-at-none", state_with(restarts=[entry(None)]), "restarts"),
    case("restart-at-nan", state_with(restarts=[entry(math.nan)]), "restarts"),
    case("restart-at-inf", state_with(restarts=[entry(math.inf)]), "restarts"),
    case("restart-at-minus-inf", state_with(restarts=[entry(-math.inf)]), "restarts"),
    case("restart-at-1e308", state_with(restarts=[entry(1e308)]), "restarts"),
    case("restart-at-huge-int", state_with(restarts=[entry(10**400)]), "restarts"),
    case("restart-at-bool", state_with(restarts=[entry(True)]), "restarts"),
    case("restart-at-nested-dict", state_with(restarts=[entry({"a": {"b": 1}})]), "restarts"),
    case(
        "restart-times-in-the-future",
        state_with(restarts=[entry(NOW + DECADE_S), entry(NOW + DECADE_S + 60)]),
        "restarts",
    ),
    case(
        "restart-reason-and-outcome-wrong",
        state_with(restarts=[entry(NOW - 7200, reason={"x": [1]}, outcome=5, took_s=math.nan)]),
        "restarts",
    ),
    case("answered-string", state_with(answered_activation="boot"), "answered_activation"),
    case("answered-bool", state_with(answered_activation=True), "answered_activation"),
    case("answered-negative", state_with(answered_activation=-1), "answered_activation"),
    case("answered-float", state_with(answered_activation=1.5), "answered_activation"),
    case("answered-huge-int", state_with(answered_activation=10**400), "answered_activation"),
    case("answered-2-to-the-64", state_with(answered_activation=2**64), "answered_activation"),
    case("failures-string", state_with(failures="3"), "failures"),
    case("failures-bool", state_with(failures=True), "failures"),
    case("failures-negative", state_with(failures=-5), "failures"),
    case("failures-float", state_with(failures=2.5), "failures"),
    case("failures-nan", state_with(failures=math.nan), "failures"),
    case("failures-huge-int", state_with(failures=10**400), "failures"),
    case("failures-5000-digits", b'{"failures": 1' + b"0" * 5000 + b"}", "failures"),
    case("failures-nested", state_with(failures=nested(300)), "failures"),
    case("last-check-list", state_with(last_check=[1, 2]), "last_check"),
    case("last-check-at-infinity", state_with(last_check={**CHECK, "at": math.inf}), "last_check"),
    case(
        "last-check-in-the-future",
        state_with(last_check={**CHECK, "at": NOW + DECADE_S}),
        "last_check",
        clock=True,
    ),
    case("held-string", state_with(restarts=RECENT, held="forever"), "held", restarts=0),
    case("held-list", state_with(restarts=RECENT, held=[NOW]), "held", restarts=0),
    case(
        "held-times-wrong",
        state_with(restarts=RECENT, held={"since": math.nan, "until": 1e308}),
        "held",
        restarts=0,
    ),
]


def write_state(tmp_path, raw: bytes | None) -> str:
    path = tmp_path / "state.json"
    if raw is not None:
        path.write_bytes(raw)
    return str(path)


def warnings(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(STATE_WARNING)]


# --- the host program ---------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "field", "restarts", "clock"), CASES)
def test_the_watchdog_reads_a_hostile_state_and_decides(
    host, tmp_path, capsys, raw, field, restarts, clock
):
    path = write_state(tmp_path, raw)
    fake = host([False, True])
    assert run(tmp_path, now=NOW, **{"--failures": "1"}) == 0
    out = capsys.readouterr().out
    lines = warnings(out)
    if field is None:
        assert lines == []
    else:
        [line] = lines  # one line, naming the file and the field
        assert line.startswith(f"{STATE_WARNING}{path}: ") and field in line, line
    assert fake.restarts == restarts, out
    # What it wrote back is strict JSON the next run reads without a word.
    saved = (tmp_path / "state.json").read_text()
    json.loads(saved, parse_constant=lambda name: pytest.fail(f"{name} written back"))
    assert run(tmp_path, now=NOW + 30) == 0
    assert warnings(capsys.readouterr().out) == []


def test_restart_times_in_the_future_hold_no_restart_off(host, tmp_path, capsys):
    """The clock went back ten years: the restarts it recorded are not within the last hour
    of the clock it has now, and no hold lasts until they are."""
    ahead = [entry(NOW + DECADE_S), entry(NOW + DECADE_S + 60)]
    write_state(
        tmp_path,
        state_with(
            failures=1, restarts=ahead, held={"since": NOW + DECADE_S, "until": NOW + DECADE_S}
        ),
    )
    fake = host([False])
    run(tmp_path, now=NOW)
    out = capsys.readouterr().out
    assert fake.restarts == 1 and "NOT restarting" not in out, out
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["held"] is None
    assert [item["at"] for item in saved["restarts"]] == [NOW]
    assert "did the clock go back" in out


def test_a_restart_a_few_seconds_ahead_is_clock_skew_and_still_counts(host, tmp_path, capsys):
    """Within the skew allowance a restart counts: two of them hold the third off."""
    write_state(tmp_path, state_with(restarts=[entry(NOW - 60), entry(NOW + 30)]))
    fake = host([False])
    run(tmp_path, now=NOW, **{"--failures": "1"})
    out = capsys.readouterr().out
    assert fake.restarts == 0 and "NOT restarting" in out and warnings(out) == []


def test_the_watchdog_stays_python_3_9_and_standard_library_only():
    """Run as a script on a host, it imports its siblings (api_key.py, decode_client.py) and
    the standard library, in Python 3.9's syntax."""
    tree = ast.parse(program_path("watchdog.py").read_text(), feature_version=(3, 9))
    allowed = set(sys.stdlib_module_names) | {"__future__", "api_key", "decode_client"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            assert node.module.split(".")[0] in allowed, node.module
        elif isinstance(node, ast.Import):
            assert {alias.name.split(".")[0] for alias in node.names} <= allowed


# --- the audit ----------------------------------------------------------------------------

# The audit reads the file with checks/facts/files.py's JsonRecord: a file that is missing, empty,
# not UTF-8, not JSON or JSON null reaches the judge as None, as a file not yet written does
# ("no decode check yet"). The judge is given the rest as a recorded report carries it.
NOT_JSON_OBJECT_OR_VALUE = {"empty", "not UTF-8", "not JSON"}
PARSED = [
    param
    for param in CASES
    if param.values[0] not in (None, b"null")
    and param.id not in {"nested-too-deep", "failures-5000-digits"}
    and param.values[1] not in NOT_JSON_OBJECT_OR_VALUE
]


def judged(value: object, now: float | None = None):
    reading = {"timer_unit": "sglang-watchdog.timer", "timer": TIMER, "state": value}
    if now is None:
        return findings_for_watchdog(True, reading)
    return findings_for_watchdog(True, reading, now=now)


@pytest.mark.parametrize(("raw", "field", "restarts", "clock"), PARSED)
def test_the_audit_judges_a_hostile_state(raw, field, restarts, clock):
    value = json.loads(raw)
    findings = judged(value, now=NOW if clock else None)
    unread = [f for f in findings if f.code == "watchdog" and "could not be read" in f.message]
    [finding] = unread
    assert finding.level == "warn" and field in finding.message, finding.message
    assert [f.level for f in findings if f.level == "ok"] == [], findings
    for found in findings:  # what a report prints and stores
        json.dumps(found.as_dict(), allow_nan=False)


@pytest.mark.parametrize(("raw", "field", "restarts", "clock"), PARSED)
def test_the_audit_as_the_judge_calls_it_never_raises(raw, field, restarts, clock):
    findings = judged(json.loads(raw))
    assert findings and all(f.code.startswith("watchdog") for f in findings)


def test_the_audit_holds_no_restart_in_the_future_against_its_last_check():
    value = json.loads(
        state_with(
            failures=1,
            last_check={"at": NOW - 60, "ok": False, "reason": "timeout"},
            restarts=[entry(NOW + DECADE_S)],
            held={"since": NOW + DECADE_S, "until": NOW + DECADE_S + 3600},
        )
    )
    findings = judged(value)
    text = " ".join(f.message for f in findings)
    assert "restarts nothing before" not in text and "2037" not in text, text
    assert [f.level for f in findings] == ["warn"], findings


@pytest.mark.parametrize("reading", [[1], "state", 7, {"timer": [1], "state": None}])
def test_the_audit_survives_a_reading_of_the_wrong_shape(reading):
    findings = findings_for_watchdog(True, reading)
    assert [f.level for f in findings] == ["warn"]


# --- the audit's read of the state file: there but unreadable is no "not written yet" -------


@pytest.mark.parametrize(
    ("content", "present", "readable"),
    [
        (None, False, False),  # never written: the first check is still to come
        (b'{"failures": 0, "restarts": []}', True, True),
        (b"", True, False),
        (b'{"failures": 0, "restar', True, False),  # cut off
        (b"\xff\xfe{}", True, False),  # not UTF-8
        (b"[" * 100000, True, False),  # nested past the parser's recursion
        (b"[1, 2]", True, False),  # not an object
    ],
)
def test_the_state_file_fact_tells_unreadable_from_missing(tmp_path, content, present, readable):
    import subprocess

    from checks.facts import StateFile

    path = tmp_path / "state.json"
    if content is not None:
        path.write_bytes(content)
    fact = StateFile()
    out = subprocess.run(
        ["sh", "-c", fact.command(path=str(path))], capture_output=True, text=True, check=True
    ).stdout
    read = fact.process(out.splitlines())
    assert read["present"] is present and (read["record"] is not None) is readable


def test_an_unreadable_state_file_is_a_warning_never_an_ok():
    from pyinfra_sglang.audit.watchdog import findings_for_watchdog

    timer = {"LoadState": "loaded", "ActiveState": "active", "SubState": "waiting"}
    [finding] = findings_for_watchdog(True, {"timer": timer, "state": None, "state_present": True})
    assert finding.level == "warn" and "its state file could not be read" in finding.message
    [first] = findings_for_watchdog(True, {"timer": timer, "state": None, "state_present": False})
    assert first.level == "ok" and "no decode check yet" in first.message
