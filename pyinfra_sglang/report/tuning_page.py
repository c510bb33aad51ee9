"""The tuner's page: the objective, every trial with its verdict and diagnosis, the winner as
an overrides block, in the benchmark report's style."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyinfra_sglang.report.page import escape, write_page
from pyinfra_sglang.tuning.judge import Objective
from pyinfra_sglang.tuning.search import State
from pyinfra_sglang.tuning.summary import (
    change_text,
    concurrencies_of,
    throughput_cells,
    verdict_text,
)

PAGE = "tune.html"


def write_tuning_page(
    out: str | Path,
    host: str,
    state: State,
    start: dict[str, Any],
    objective: Objective,
    overrides: str,
    stopped: str,
) -> Path:
    trials = state.trials
    concurrencies = concurrencies_of(trials)
    head = (
        "".join(
            f"<th>{escape(h)}</th>"
            for h in ["#", "change", "rounds", *[f"c={c} tok/s" for c in concurrencies], "verdict"]
        )
        + "<th>diagnosis</th>"
    )
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{escape(cell)}</td>"
            for cell in [
                t.trial,
                change_text(t),
                t.rounds,
                *throughput_cells(t, concurrencies),
                verdict_text(t),
                t.diagnosis or "",
            ]
        )
        + "</tr>"
        for t in trials
    )
    status = f"stopped early: {stopped}" if stopped else "the search ran to its end"
    body = (
        f"<h1>Tuning {escape(host)}</h1>"
        f"<p>Objective: {escape(objective.describe())}. Starting settings: "
        f"{escape(start)}. {escape(status)}.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        "<h2>Winner</h2>"
        f"<pre>{escape(overrides)}</pre>"
    )
    return write_page(out, PAGE, f"Tuning {host}", body)
