"""``dcgmi diag -r <level>``'s table -> its tests and results. Tested on real outputs
(tests/fixtures/gpu/public/dcgmi_diag_*): DCGM 3's rows ("GPU Memory | Pass - GPU: 1", a
"Fail - GPU: 0" row under it, "Warning"/"Info" rows wrapped over several lines) and DCGM 4's
("software | Pass" with a "GPU0: Pass" row per GPU)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypedDict

from pyinfra_sglang import data


class DiagTest(TypedDict):
    category: str  # "Deployment", "Integration", "Hardware", "Stress", ...
    name: str  # "Persistence Mode", "GPU Memory", "software", ...
    result: str  # the worst of its results: "Fail", "Warn", "Pass" or "Skip"
    gpus: dict[str, str]  # GPU index -> result, where the table names GPUs
    details: list[str]  # its Warning/Info/Error text, lines joined


class DiagResult(TypedDict):
    metadata: dict[str, str]  # "DCGM Version" -> "4.2.3", ...
    tests: list[DiagTest]


_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>[^|]*)\|\s*$")
_SECTION = re.compile(r"^[|+]-+\s+(?P<category>[A-Za-z][A-Za-z ]*?)\s+-+\+")
# A result word in any case and its longer forms (Failed, FAIL, Error, Warning, Passed,
# Skipped): each is one of data/dcgm.toml's results (_WORDS); Error is a failure.
_WORDS = {
    "fail": "Fail",
    "failed": "Fail",
    "failure": "Fail",
    "error": "Fail",
    "warn": "Warn",
    "warning": "Warn",
    "pass": "Pass",
    "passed": "Pass",
    "skip": "Skip",
    "skipped": "Skip",
}
_RESULT = "|".join(sorted(_WORDS, key=len, reverse=True))
_GPU_RESULT = re.compile(
    rf"^(?:GPU\s*(?P<gpu>\d+)\s*:\s*(?P<r1>{_RESULT})\b|(?P<r2>{_RESULT})\b"
    r"(?:\s*-\s*GPU(?:s)?\s*:\s*(?P<gpus>[\d, ]+|All))?)",
    re.IGNORECASE,
)


def worst(results: Iterable[str]) -> str:
    order = data.dcgm().diag.results
    return min(results, key=order.index, default="Skip")


def parse_dcgm_diag(lines: Iterable[str]) -> DiagResult:
    """Every test row of ``dcgmi diag``'s table, in order, with the worst result among its
    rows; Metadata rows as metadata; lines outside the table are skipped."""
    detail_rows = set(data.dcgm().diag.detail_rows)
    result: DiagResult = {"metadata": {}, "tests": []}
    category = ""
    detail: list[str] | None = None
    for raw in lines:
        line = raw.rstrip()
        section = _SECTION.match(line)
        if section:
            category, detail = section["category"], None
            continue
        row = _ROW.match(line)
        if not row:
            continue
        name, value = row["name"].strip(), row["value"].strip()
        if name == "Diagnostic" and value == "Result":
            continue
        if category == "Metadata":
            if name:
                result["metadata"][name] = value
            continue
        tests = result["tests"]
        cell = row["value"][1:-2]  # the text, wrapped at the column inside words
        if name in detail_rows:
            if tests:
                tests[-1]["details"].append(cell)
                detail = tests[-1]["details"]
            continue
        found = _GPU_RESULT.match(value)
        if name:
            tests.append(
                {"category": category, "name": name, "result": "Skip", "gpus": {}, "details": []}
            )
            detail = None
        elif not tests:
            continue  # a capture starting inside a wrapped row of an earlier test
        test = tests[-1]
        if name and not found and value:
            # A result word dcgmi's known ones do not hold: not a pass, and said.
            test["result"] = "Warn"
            test["details"].append(f"unrecognized result {value!r}")
            continue
        if found and (name or detail is None):
            status = _WORDS[(found["r1"] or found["r2"]).lower()]
            test["result"] = worst([test["result"], status]) if test["gpus"] or not name else status
            for gpu in _gpus(found):
                test["gpus"][gpu] = status
            if not name:
                test["result"] = worst([test["result"], *test["gpus"].values()])
        elif detail:
            detail[-1] += cell
    for test in result["tests"]:
        test["details"] = [" ".join(text.split()) for text in test["details"]]
    return result


def _gpus(found: re.Match) -> list[str]:
    if found["gpu"]:
        return [found["gpu"]]
    listed = (found["gpus"] or "").strip()
    if not listed or listed == "All":
        return []
    return [gpu.strip() for gpu in listed.split(",") if gpu.strip()]
