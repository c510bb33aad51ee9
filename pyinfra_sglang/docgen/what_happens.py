"""docs/what-happens.md: what `pyinfra INVENTORY deploy/site.py --dry` did on a real host,
generated from the recorded runs (tests/fixtures/audit/h200-host-mode/, an H200 VM, once on
the provider's driver and once in managed mode), so the page cannot drift from them. Each
fact the run read is explained by its class's own docstring (checks/facts/, read with ast:
the core never imports checks/), each decision and change is the line the deploy printed.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "tests" / "fixtures" / "audit" / "h200-host-mode"
FACTS = ROOT / "checks" / "facts"
PYINFRA_FACTS = "https://docs.pyinfra.com/en/3.x/facts/{module}.html"


@dataclass(frozen=True)
class Capture:
    title: str
    file: str
    about: str


RUNS = (
    Capture(
        "Host mode: a rented GPU host with its provider's driver",
        "console-site-dry-host.txt",
        'One H200 in a VM, `nvidia_driver_source = "host"`: the driver, Fabric Manager and '
        "CUDA are the host's own and stay as they are.",
    ),
    Capture(
        "Managed mode: the deploy's own driver",
        "console-site-dry-managed.txt",
        'The same H200, `nvidia_driver_source = "managed"` (the default): NVIDIA\'s '
        "repository, the pinned driver branch and the CUDA Toolkit are the deploy's.",
    ),
)
_LINE = re.compile(r"^\s*\[(?P<host>[^\]]+)\]\s+(?P<text>.*)$")
_FACT = re.compile(r"^Loaded fact (?P<name>[\w.]+)(?: \((?P<args>.*)\))?$")


def class_summaries(paths) -> dict[str, str]:
    """Class name -> the first paragraph of its docstring, for the classes of ``paths``."""
    found = {}
    for path in paths:
        for node in ast.parse(Path(path).read_text()).body:
            if isinstance(node, ast.ClassDef):
                paragraph = (ast.get_docstring(node) or "").split("\n\n")[0]
                if paragraph.strip():
                    found[node.name] = " ".join(paragraph.split())
    return found


def fact_summaries(folder: Path = FACTS) -> dict[str, str]:
    """Every fact of checks/facts/, by class name."""
    return class_summaries(sorted(folder.glob("*.py")))


def pyinfra_fact_summary(module: str, name: str) -> str:
    """pyinfra's own fact ``module.name``, by its docstring (read from the installed pyinfra)."""
    spec = importlib.util.find_spec(f"pyinfra.facts.{module}")
    summaries = class_summaries([spec.origin]) if spec and spec.origin else {}
    link = f"[pyinfra's {module}.{name}]({PYINFRA_FACTS.format(module=module)})"
    return f"{summaries[name]} ({link})" if name in summaries else link


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def run_markdown(capture: Capture, facts: dict[str, str]) -> str:
    lines = (CAPTURES / capture.file).read_text().splitlines()
    read: dict[str, str] = {}
    decided, changed, summary = [], [], []
    for line in lines:
        match = _LINE.match(line)
        if not match:
            continue
        text = match["text"]
        fact = _FACT.match(text)
        if fact:
            name = fact["name"]
            module, _, cls = name.rpartition(".")
            if module.startswith("checks.facts"):
                read.setdefault(name, facts.get(cls, ""))
            else:
                read.setdefault(name, pyinfra_fact_summary(module, cls))
        elif text.startswith("noop: "):
            decided.append(text.removeprefix("noop: "))
        elif " would: " in text:
            changed.append(text)
        elif text.startswith("would change: "):
            summary.append(text)
    out = [f"## {capture.title}", "", capture.about, "", f"Recorded: `{capture.file}`.", ""]
    out += ["### What it reads", "", "| fact | what it reads |", "| --- | --- |"]
    out += [f"| `{name}` | {_cell(what)} |" for name, what in read.items()]
    out += ["", "### What it leaves as it is, and why", ""]
    out += [f"- {item}" for item in decided]
    out += ["", "### What it would change", ""]
    out += [f"- {item}" for item in changed]
    if summary:
        out += ["", "### The run's summary line (cut at 300 characters)", ""]
        out += [f"- {item}" for item in summary]
    return "\n".join(out) + "\n"


def what_happens_markdown() -> str:
    """The generated part of docs/what-happens.md: one section a recorded run."""
    facts = fact_summaries()
    return "\n".join(run_markdown(capture, facts) for capture in RUNS)
