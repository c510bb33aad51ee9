"""Hostile server-side timelines: ``server_metrics.json`` as the diagnosis reads it
(served_benchmark/server_metrics.py check_server_metrics, diagnosis/server_side.py) and
``metrics.txt`` as summarize_polls reads it. A malformed shape or an absurd number (NaN,
infinities, +-1e308, negative counts, times that go back) gives no traceback and no verdict:
the file is refused naming the file and the field, and the diagnosis says it could not read
the server side; a bad poll in metrics.txt is dropped with a warning."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from pyinfra_sglang.diagnosis.diagnose import diagnose_results, format_report, load_results
from pyinfra_sglang.diagnosis.server_side import SERVER_VERDICTS, server_report
from pyinfra_sglang.served_benchmark.server_metrics import (
    POLL_MARK,
    ServerMetricsError,
    check_server_metrics,
    summarize_polls,
)

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"


def _real_polled() -> dict:
    """server_metrics.json of the real capped run (tests/fixtures/sglang-0.5.17-h200/capped):
    at reading 100 its c=32 step ran with 30 requests queued behind 2 running."""
    lines = (REAL / "capped/metrics.txt").read_text().splitlines()
    return summarize_polls(lines, "0.5.17")


REAL_POLLED = _real_polled()
AT = 100  # a reading inside the c=32 step's load


def _with(position: int = AT, **values) -> dict:
    polled = copy.deepcopy(REAL_POLLED)
    polled["timeline"][position].update(values)
    return polled


def _text(polled: dict, **raw: str) -> str:
    """JSON text, NaN and Infinity as Python's json module writes them; ``raw``: a value put
    in as written (a number no float holds)."""
    text = json.dumps(polled)
    for key, value in raw.items():
        text = text.replace(f'"{key}"', value)
    return text


_LATER_STRING = copy.deepcopy(REAL_POLLED)
_LATER_STRING["timeline"].insert(AT, "x")
# (name, server_metrics.json as text, what the refusal names).
HOSTILE = [
    ("timeline a string", '{"timeline": "abc"}', "timeline"),
    ("timeline an object", '{"timeline": {"t": 1.0}}', "timeline"),
    ("timeline a number", '{"timeline": 5}', "timeline"),
    ("a reading a list", '{"timeline": [[1.0, 2.0]]}', "timeline[0]"),
    ("a later reading a string", _text(_LATER_STRING), f"timeline[{AT}]"),
    ("queued a string", _text(_with(queued="many")), f"timeline[{AT}]: queued"),
    ("token_usage NaN", _text(_with(token_usage=float("nan"))), "token_usage"),
    ("running 1e308", _text(_with(running=1e308)), "running"),
    ("queued -1e308", _text(_with(queued=-1e308)), "queued"),
    ("t Infinity", _text(_with(t=float("inf"))), f"timeline[{AT}]: t"),
    ("t a bool", _text(_with(t=True)), f"timeline[{AT}]: t"),
    ("a negative count", _text(_with(retracted_requests=-5.0)), "retracted_requests"),
    ("time going back", _text(_with(t=1796317190.0)), f"timeline[{AT}]: t"),
    ("max_total_num_tokens inf", _text(_with(0, max_total_num_tokens=float("inf"))), "max_"),
    ("a magnitude past 1e15", _text(_with(prompt_tokens=1e16)), "prompt_tokens"),
    ("a share past 1", _text(_with(token_usage=7.0)), "token_usage"),
    ("a huge integer", _text(_with(queued="HUGE"), HUGE="1" + "0" * 400), "queued"),
    ("a summary NaN", _text({**REAL_POLLED, "kv_cache_usage": float("nan")}), "kv_cache_usage"),
]


@pytest.mark.parametrize(("name", "text", "field"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_the_check_refuses_naming_the_file_and_field(name, text, field):
    with pytest.raises(ServerMetricsError) as refused:
        check_server_metrics(json.loads(text), "run/server_metrics.json")
    message = str(refused.value)
    assert message.startswith("run/server_metrics.json: ") and field in message, message


@pytest.mark.parametrize(("name", "text", "field"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_the_server_report_says_it_could_not_read_it(name, text, field):
    server = json.loads(text)
    report, findings = server_report(server, [], {}, [], None, {}, 0.0)
    assert findings == []
    assert field in report["unreadable"] and report["scaling"] == []
    assert report["headline"].startswith("could not read the server side")
    # Nothing later (the report's timeline chart) reads the refused timeline.
    assert server.get("timeline") in (None, [])


def _run(tmp_path: Path, text: str) -> dict:
    folder = tmp_path / "capped"
    shutil.copytree(REAL / "capped", folder)
    (folder / "server_metrics.json").write_text(text)
    return diagnose_results(load_results(folder))


@pytest.mark.parametrize(
    ("name", "text", "field"),
    [
        pytest.param(*h, id=h[0])
        for h in HOSTILE
        if h[0] != "a summary NaN"  # diagnose.py refuses that file itself, as before
    ],
)
def test_the_diagnosis_gives_no_server_verdict(tmp_path, name, text, field):
    report = _run(tmp_path, text)
    assert not {f.code for f in report["findings"]} & set(SERVER_VERDICTS)
    assert "memory-capacity-bound" not in {f.code for f in report["findings"]}
    assert field in report["server"]["unreadable"]
    assert "server_metrics.json" in report["server"]["unreadable"]
    text = format_report(report)
    assert "could not read the server side" in text and "binds first" not in text


def test_the_real_timeline_still_gives_its_verdicts(tmp_path):
    polled = summarize_polls((REAL / "capped/metrics.txt").read_text().splitlines(), "0.5.17")
    check_server_metrics(polled, "server_metrics.json")
    report = _run(tmp_path, json.dumps(polled))
    assert "unreadable" not in report["server"]
    assert report["server"]["headline"].startswith("admission-capped from c=8")


def _polls(*values: str, stamps=("1796317196.1", "1796317197.1", "1796317198.1")) -> list[str]:
    lines = []
    for stamp, value in zip(stamps, values):
        lines += [
            f"{POLL_MARK} {stamp}",
            'sglang:token_usage{tp_rank="0"} 0.5',
            f'sglang:num_queue_reqs{{tp_rank="0"}} {value}',
        ]
    return lines


@pytest.mark.parametrize(
    ("lines", "kept", "warned"),
    [
        (_polls("1.0", "1e5e5", "2.0"), 2, "1e5e5"),  # float() refuses it: a traceback before
        (_polls("1.0", "-", "2.0"), 2, "'-'"),
        (_polls("1.0", "1e999", "2.0"), 2, "1e999"),  # inf
        (_polls("1.0", "-3.0", "2.0"), 2, "-3.0"),  # a negative count
        (_polls("1.0", "1e308", "2.0"), 2, "1e308"),
        (_polls("1.0", "2.0", "3.0", stamps=("5.0", "inf", "6.0")), 2, "inf"),
        (_polls("1.0", "2.0", "3.0", stamps=("5.0", "nan", "6.0")), 2, "nan"),
        (_polls("1.0", "2.0", "3.0", stamps=("5.0", "7.0", "6.0")), 2, "6.0"),  # back in time
        (_polls("1.0", "2.0", "3.0", stamps=("5.0", "x", "6.0")), 2, "'x'"),
    ],
)
def test_a_bad_poll_in_metrics_txt_is_dropped_with_a_warning(lines, kept, warned):
    warnings: list[str] = []
    summary = summarize_polls(lines, "0.5.16", warnings=warnings)
    assert summary["polls"] == kept
    assert any(warned in w for w in warnings), warnings
    check_server_metrics(summary, "server_metrics.json")


def test_ranks_summing_past_the_bound_are_dropped():
    lines = [f"{POLL_MARK} 5.0", 'sglang:token_usage{r="0"} 0.5']
    lines += [f'sglang:num_queue_reqs{{r="{r}"}} 9e14' for r in range(3)]
    lines += [f"{POLL_MARK} 6.0", 'sglang:token_usage{r="0"} 0.5', "sglang:num_queue_reqs 1.0"]
    warnings: list[str] = []
    summary = summarize_polls(lines, "0.5.16", warnings=warnings)
    assert summary["polls"] == 1 and summary["queued_requests"] == 1
    assert warnings and "queued" in warnings[0]
    check_server_metrics(summary, "server_metrics.json")
