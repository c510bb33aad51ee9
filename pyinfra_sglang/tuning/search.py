"""The search: coordinate-wise, one setting at a time against the incumbent, replayed from the
journal's rounds so that it is a pure function of what was measured.

Why coordinate-wise and not successive halving or a model-based search: a trial here is a
server restart plus a benchmark (minutes each), and a difference means something only outside
the run-to-run spread. Successive halving spends most of its trials on short, low-fidelity
benchmarks, which on a serving engine are dominated by noise and warm-up; a model-based search
needs more trials than a time budget of hours allows. Changing one setting at a time against
the incumbent keeps every comparison an A/B the noise band can judge, spends extra rounds only
on close calls, and lets a finished search name which settings mattered and which were ties.
Its known weakness, interactions between settings, is reduced by the order (largest effects
first, data/tuning.toml) and by a setting's ``requires``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from pyinfra_sglang.data_models import TuningSetting
from pyinfra_sglang.tuning.judge import (
    BETTER,
    CLOSE,
    FAILED,
    Measurement,
    Objective,
    Verdict,
    judge,
)
from pyinfra_sglang.tuning.space import Space

BASELINE = "baseline"


class JournalMismatch(ValueError):
    """The journal's rounds are not the ones this search would have run."""


@dataclass(frozen=True)
class Round:
    """One recorded round of a trial (a line of the journal)."""

    trial: int
    round: int
    settings: dict[str, Any]
    status: str  # "ok" or "failed"
    lines: list[dict] = field(default_factory=list)  # bench_serving's results
    seconds: float = 0.0
    diagnosis: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Measure:
    """The next round to run: serve ``settings``, benchmark, record it as this trial's round."""

    trial: int
    round: int
    settings: dict[str, Any]
    change: dict[str, Any]  # against the incumbent ({} for the baseline)
    reason: str


@dataclass(frozen=True)
class Trial:
    """A judged trial."""

    trial: int
    settings: dict[str, Any]
    change: dict[str, Any]
    rounds: int
    measurement: Measurement | None
    verdict: Verdict
    seconds: float
    diagnosis: str | None
    error: str | None


@dataclass(frozen=True)
class State:
    """Where a search stands: the next round (None when finished), the trials judged so far
    (the baseline first), the incumbent, and at most how many trials are left."""

    next: Measure | None
    trials: list[Trial]
    incumbent: dict[str, Any]
    remaining: int
    stopped: str = ""  # why a finished search stopped early (its baseline failed)


def candidates(
    setting: TuningSetting, incumbent: dict[str, Any], space: Space | None = None
) -> list[dict[str, Any]]:
    """The settings to try for ``setting``: each other value on top of the incumbent, where
    its requirements hold. A setting of ``space`` whose requirement the new value breaks is
    cleared (None: the profile's default is no value): graphs off clear the graph batch size,
    which SGLang would otherwise be given for graphs it does not capture (render refuses it)."""
    found = []
    for value in setting.values:
        if value == incumbent.get(setting.name):
            continue
        settings = {**incumbent, setting.name: value}
        if not setting.allowed_with(settings):
            continue
        for other in space.settings if space else ():
            cleared = settings.get(other.name) is not None and not other.allowed_with(settings)
            if cleared:
                settings[other.name] = None
        found.append(settings)
    return found


def _by_trial(rounds: list[Round]) -> dict[int, list[Round]]:
    grouped: dict[int, list[Round]] = {}
    for r in rounds:
        grouped.setdefault(r.trial, []).append(r)
    for number, trial_rounds in grouped.items():
        trial_rounds.sort(key=lambda r: r.round)
        if [r.round for r in trial_rounds] != list(range(1, len(trial_rounds) + 1)):
            raise JournalMismatch(f"trial {number}: rounds {[r.round for r in trial_rounds]}")
    return grouped


def _remaining(
    space: Space, after_index: int, incumbent: dict[str, Any], order: tuple | None = None
) -> int:
    """Trials the settings after ``after_index`` (of ``order``, the space's by default) hold
    (at most: a better value found on the way can change which a requirement allows)."""
    settings = space.settings if order is None else order
    return sum(len(candidates(s, incumbent, space)) for s in settings[after_index + 1 :])


def replay(space: Space, start: dict[str, Any], objective: Objective, rounds: list[Round]) -> State:
    """The search's state after ``rounds``: pure, so a search killed at any point resumes from
    its journal and reaches the same decisions."""
    recorded = _by_trial(rounds)
    trials: list[Trial] = []
    numbers = itertools.count()  # trials are numbered in the order the search reaches them

    def trial_state(settings, change, reason, incumbent_measurement, left, incumbent):
        """(Trial, None) once judged; (None, State) when a round is still to run. ``left``:
        the trials after this one, at most."""
        number = next(numbers)
        done = recorded.get(number, [])
        for r in done:
            if r.settings != settings:
                raise JournalMismatch(
                    f"trial {number} round {r.round} recorded {r.settings}, this search would "
                    f"run {settings}: the journal belongs to another search"
                )
        if not done:
            measure = Measure(number, 1, settings, change, reason)
            return None, State(measure, trials, incumbent, 1 + left)
        seconds = sum(r.seconds for r in done)
        last = done[-1]
        if last.status != "ok":
            verdict = Verdict(FAILED, why=last.error or "")
            return Trial(
                number,
                settings,
                change,
                len(done),
                None,
                verdict,
                seconds,
                last.diagnosis,
                last.error,
            ), None
        measurement = Measurement.from_lines([line for r in done for line in r.lines])
        if incumbent_measurement is None:
            verdict = Verdict(BASELINE)
        else:
            verdict = judge(incumbent_measurement, measurement, objective)
            if verdict.verdict == CLOSE and len(done) < space.max_rounds:
                measure = Measure(
                    number,
                    len(done) + 1,
                    settings,
                    change,
                    f"close call ({_close(verdict)}): another round",
                )
                return None, State(measure, trials, incumbent, 1 + left)
            if verdict.verdict == CLOSE:  # out of rounds: still inside the noise band
                verdict = Verdict(
                    "tie",
                    verdict.difference_pct,
                    verdict.spread_pct,
                    f"within the noise after {len(done)} rounds",
                )
        return Trial(
            number, settings, change, len(done), measurement, verdict, seconds, last.diagnosis, None
        ), None

    incumbent = dict(start)
    baseline, state = trial_state(
        incumbent, {}, "the starting settings", None, _remaining(space, -1, incumbent), incumbent
    )
    if state:
        return state
    trials.append(baseline)
    if baseline.measurement is None:
        return State(None, trials, incumbent, 0, "the starting settings failed to start")
    best = baseline.measurement
    # A server limit the baseline's diagnosis names moves the settings that bind it first.
    order = space.order_for(baseline.diagnosis)
    for index, setting in enumerate(order):
        tried = candidates(setting, incumbent, space)
        for position, settings in enumerate(tried):
            change = {setting.name: settings[setting.name]}
            reason = f"{setting.name} = {settings[setting.name]!r}"
            left = len(tried) - position - 1 + _remaining(space, index, incumbent, order)
            trial, state = trial_state(settings, change, reason, best, left, incumbent)
            if state:
                return state
            trials.append(trial)
            if trial.verdict.verdict == BETTER:
                incumbent, best = settings, trial.measurement
    return State(None, trials, incumbent, 0)


def _close(verdict: Verdict) -> str:
    if verdict.difference_pct is None or verdict.spread_pct is None:
        return "one run a side"
    return f"{verdict.difference_pct:+.1f}% within ±{verdict.spread_pct:.1f}%"


def winning_overrides(start: dict[str, Any], incumbent: dict[str, Any]) -> dict[str, Any]:
    """The settings the search changed: what to lay over the profile."""
    return {k: v for k, v in incumbent.items() if start.get(k) != v}
