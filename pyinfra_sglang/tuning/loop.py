"""The search loop, whatever runs a round (pyinfra on a host, or a script beside a real server
on a GPU machine): replay the journal, run the next round, record it, until the search ends or
its time budget is spent."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyinfra_sglang.tuning.journal import (
    append_round,
    budget_problem,
    open_journal,
    trial_estimate_s,
)
from pyinfra_sglang.tuning.judge import Objective
from pyinfra_sglang.tuning.search import Measure, Round, State, replay
from pyinfra_sglang.tuning.space import Space
from pyinfra_sglang.tuning.summary import progress_line


class TuneRefused(ValueError):
    """The search cannot start as asked (the message says why)."""


@dataclass(frozen=True)
class Outcome:
    state: State
    stopped: str  # "" when the search ran to its end


def run_search(
    space: Space,
    start: dict[str, Any],
    objective: Objective,
    folder: Path,
    run_round: Callable[[Measure], Round],
    budget_s: float,
    trial_bound_s: float,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Run rounds until the search ends or the budget is spent. ``trial_bound_s``: the most one
    round can take (start timeout plus the benchmark's own bound); refused up front when it
    exceeds the budget. A journal already in ``folder`` is resumed (its rounds are not run
    again); the budget counts from this call."""
    problem = budget_problem(budget_s, 0, trial_bound_s, trial_bound_s)
    if problem:
        raise TuneRefused(problem)
    rounds = open_journal(folder, space, start, objective)
    if rounds:
        say(f"resuming the search in {folder}: {len(rounds)} rounds already recorded")
    began = clock()
    while True:
        state = replay(space, start, objective, rounds)
        if state.next is None:
            return Outcome(state, state.stopped)
        elapsed = clock() - began
        estimate = trial_estimate_s(rounds, trial_bound_s)
        problem = budget_problem(budget_s, elapsed, estimate, trial_bound_s)
        if problem:
            say(f"stopping: {problem}")
            return Outcome(state, problem)
        say(progress_line(state, elapsed, estimate))
        started = clock()
        # The round's time as this loop saw it (serve, wait for health, benchmark): the ETA's.
        done = replace(run_round(state.next), seconds=clock() - started)
        append_round(folder, done)
        rounds.append(done)
