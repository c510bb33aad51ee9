"""Issue 47 (no silent drop): `diagnose` and `report` on a run folder as the benchmark leaves
it on the host (samples, bench lines, the raw /metrics poll file, no server_metrics.json)
read the poll file, and say so; a profile.json without the GPU takes the sampled GPU's name
for the GPU table's rates, and says so. The folders are real SGLang 0.5.17 runs on an H200
(tests/fixtures/sglang-0.5.17-h200/), whose verdicts docs/benchmark-and-diagnosis.md prints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pyinfra_sglang.diagnosis.diagnose import diagnose_results, format_report, load_results

REAL = Path(__file__).parent.parent / "fixtures" / "sglang-0.5.17-h200"


def run_copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(REAL / name, folder)
    return folder


def codes(report: dict) -> set[str]:
    return {f.code for f in report["findings"] if f.level == "warn"}


@pytest.mark.parametrize(
    ("run", "verdict", "line"),
    [
        ("capped", "admission-capped", "binds first: admission-capped from c=8"),
        (
            "kv-starved",
            "kv-capacity-bound",
            "c=64: 1090 tok/s (+44%), 66.8 tok/s per stream; GPUs compute-bound; server "
            "kv-capacity-bound",
        ),
    ],
)
def test_the_shipped_runs_give_the_server_verdicts_the_docs_print(tmp_path, run, verdict, line):
    folder = run_copy(tmp_path, run)
    assert not (folder / "server_metrics.json").exists() and (folder / "metrics.txt").is_file()
    report = diagnose_results(load_results(folder))
    assert verdict in codes(report)
    text = format_report(report)
    assert line in text
    assert text.startswith("Read: the server side read from metrics.txt (")
    docs = (Path(__file__).parents[2] / "docs" / "benchmark-and-diagnosis.md").read_text()
    assert line in docs  # the docs print what the shipped run gives


def test_a_summary_beside_the_poll_file_wins_and_nothing_is_said(tmp_path):
    folder = run_copy(tmp_path, "capped")
    summary = load_results(folder)["server"]
    (folder / "server_metrics.json").write_text(json.dumps(summary))
    (folder / "metrics.txt").write_text("garbage\n")
    results = load_results(folder)
    assert results["server"] == summary and results["notes"] == []


def test_a_poll_file_with_no_answered_poll_says_so(tmp_path):
    folder = run_copy(tmp_path, "capped")
    (folder / "metrics.txt").write_text("### poll 1796317196.1\n# nothing\n")
    results = load_results(folder)
    assert results["server"] is None
    assert results["notes"] == [
        "metrics.txt: no poll answered with the server's queue and KV usage"
    ]
    assert "admission-capped" not in codes(diagnose_results(results))


def test_a_profile_without_the_gpu_takes_the_sampled_one_and_says_so(tmp_path):
    folder = run_copy(tmp_path, "long-prompt-fresh")
    profile = json.loads((folder / "profile.json").read_text())
    del profile["gpu"]
    (folder / "profile.json").write_text(json.dumps(profile))
    results = load_results(folder)
    assert results["profile"]["gpu"] == "NVIDIA H200"
    assert any("profile.json names no GPU: NVIDIA H200" in note for note in results["notes"])
    text = format_report(diagnose_results(results))
    assert "prefill floor 97 ms" in text  # the H200's dense bf16 rate, from data/gpus.toml
