"""The tuner's core: the space from data, the judgement against the noise band, the search
replayed from its journal (resume after a kill), failed starts, close calls, latency limits and
the budget. A scripted engine stands in for the server: per settings, output tok/s with a
fixed run-to-run spread, as bench_serving's result lines."""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from pyinfra_sglang.tuning.journal import JOURNAL_FILE, JournalError, budget_problem, open_journal
from pyinfra_sglang.tuning.judge import Measurement, Objective, judge
from pyinfra_sglang.tuning.loop import TuneRefused, run_search
from pyinfra_sglang.tuning.search import (
    JournalMismatch,
    Round,
    candidates,
    replay,
    winning_overrides,
)
from pyinfra_sglang.tuning.space import applicable, load_space
from pyinfra_sglang.tuning.summary import overrides_block, trial_table

START = {
    "cuda_graph": False,
    "mem_fraction_static": 0.85,
    "cuda_graph_max_bs": None,
    "chunked_prefill_size": 8192,
    "schedule_policy": None,
    "max_running_requests": None,
}


def small_space(**search):
    return load_space(
        {
            "search": {
                "order": ["cuda_graph", "mem_fraction_static", "cuda_graph_max_bs"],
                "max_rounds": 3,
                **search,
            },
            "settings": {
                "cuda_graph": {"values": [True, False]},
                "mem_fraction_static": {"values": [0.85, 0.92]},
                "cuda_graph_max_bs": {"values": [64, 256], "requires": {"cuda_graph": True}},
            },
        }
    )


class Engine:
    """Output tok/s per settings: CUDA graphs 3.7x (the H200 measurement), a memory fraction
    of 0.92 that fails to start when ``oom``, everything else the same; each round's two runs
    at -spread and +spread of the rate (a spread of ±spread, deterministic)."""

    def __init__(self, oom=False, spread=0.02, graph_bs_gain=1.0):
        self.oom, self.spread, self.graph_bs_gain = oom, spread, graph_bs_gain
        self.served: list[dict] = []

    def __call__(self, step) -> Round:
        settings = step.settings
        self.served.append(settings)
        if self.oom and settings["mem_fraction_static"] == 0.92:
            return Round(
                step.trial,
                step.round,
                settings,
                "failed",
                seconds=60.0,
                error="CUDA out of memory during capture",
            )
        rate = 55.0 * (3.7 if settings["cuda_graph"] else 1.0)
        if settings.get("cuda_graph_max_bs") == 256:
            rate *= self.graph_bs_gain
        lines = []
        for noise in (1 - self.spread, 1 + self.spread):  # bench_repeat = 2
            lines.append(
                {
                    "max_concurrency": 1,
                    "output_throughput": rate * noise,
                    "median_tpot_ms": 1000 / (rate * noise),
                    "median_ttft_ms": 30.0,
                }
            )
        return Round(
            step.trial,
            step.round,
            settings,
            "ok",
            lines,
            seconds=120.0,
            diagnosis="memory-bound" if settings["cuda_graph"] else "launch-bound",
        )


def search(tmp_path, engine, space=None, objective=None, budget=36000, **kw):
    return run_search(
        space or small_space(),
        START,
        objective or Objective(1),
        tmp_path,
        engine,
        budget,
        trial_bound_s=600,
        say=kw.pop("say", lambda _: None),
        **kw,
    )


def test_the_shipped_space_loads_in_its_order_and_narrows_per_host():
    space = load_space()
    assert space.names()[0] == "cuda_graph" and "mem_fraction_static" in space.names()
    only = applicable(space, "0.5.17", "sm_90", only=["cuda_graph", "chunked_prefill_size"])
    assert only.names() == ["cuda_graph", "chunked_prefill_size"]
    with pytest.raises(ValueError, match="unknown tuning settings \\['cuda_graphs'\\]"):
        applicable(space, "0.5.17", "sm_90", only=["cuda_graphs"])


def test_a_setting_applies_only_to_its_releases_and_architectures():
    space = load_space(
        {
            "search": {"order": ["a", "b"], "max_rounds": 2},
            "settings": {
                "a": {"values": [1], "min_sglang_version": "0.5.20"},
                "b": {"values": [1], "archs": ["sm_120"]},
            },
        }
    )
    assert applicable(space, "0.5.17", "sm_120").names() == ["b"]
    assert applicable(space, "0.5.23", "sm_90").names() == ["a"]


def test_an_order_that_leaves_a_setting_out_is_refused():
    with pytest.raises(ValueError, match="must name each of"):
        load_space(
            {
                "search": {"order": ["a"], "max_rounds": 1},
                "settings": {"a": {"values": [1]}, "b": {"values": [2]}},
            }
        )


def test_a_graph_batch_size_is_tried_only_with_graphs_on():
    setting = small_space().settings[2]
    assert candidates(setting, {**START, "cuda_graph": False}) == []
    assert [c["cuda_graph_max_bs"] for c in candidates(setting, {**START, "cuda_graph": True})] == [
        64,
        256,
    ]


def test_the_search_finds_graphs_must_be_on_and_calls_the_rest_ties(tmp_path):
    outcome = search(tmp_path, Engine())
    trials = outcome.state.trials
    assert outcome.stopped == "" and outcome.state.next is None
    assert outcome.state.incumbent["cuda_graph"] is True
    verdicts = {json.dumps(t.change, sort_keys=True): t.verdict.verdict for t in trials}
    assert verdicts['{"cuda_graph": true}'] == "better"
    assert trials[1].verdict.difference_pct == pytest.approx(270, abs=15)
    # Within ±2% nothing else beats the noise: ties (a close call gets more rounds first).
    for change in (
        '{"mem_fraction_static": 0.92}',
        '{"cuda_graph_max_bs": 64}',
        '{"cuda_graph_max_bs": 256}',
    ):
        assert verdicts[change] == "tie"
    block = overrides_block({"chunked_prefill_size": 4096}, START, outcome.state)
    assert block == "sglang_profile_overrides = {'chunked_prefill_size': 4096, 'cuda_graph': True}"
    table = trial_table(trials)
    assert "cuda_graph = True" in table and "better (+" in table and "launch-bound" in table


def test_a_real_gain_on_top_of_the_incumbent_is_kept(tmp_path):
    outcome = search(tmp_path, Engine(graph_bs_gain=1.3))
    assert outcome.state.incumbent["cuda_graph_max_bs"] == 256


def test_a_close_call_is_measured_again_then_called_a_tie(tmp_path):
    # A steady 1% lead inside a ±3% spread: more rounds, at most max_rounds, then a tie.
    outcome = search(tmp_path, Engine(spread=0.03, graph_bs_gain=1.01))
    [bs256] = [t for t in outcome.state.trials if t.change == {"cuda_graph_max_bs": 256}]
    assert bs256.verdict.verdict == "tie" and bs256.rounds == 3
    assert "within the noise after 3 rounds" in bs256.verdict.why
    rounds = [json.loads(x) for x in (tmp_path / JOURNAL_FILE).read_text().splitlines()[1:]]
    assert [r["round"] for r in rounds if r["trial"] == bs256.trial] == [1, 2, 3]
    # Behind by noise: a tie at once, no further round.
    [bs64] = [t for t in outcome.state.trials if t.change == {"cuda_graph_max_bs": 64}]
    assert bs64.verdict.verdict == "tie" and bs64.rounds == 1


def test_a_failed_start_is_recorded_and_the_search_goes_on_from_the_last_good(tmp_path):
    engine = Engine(oom=True)
    outcome = search(tmp_path, engine)
    [failed] = [t for t in outcome.state.trials if t.change == {"mem_fraction_static": 0.92}]
    assert failed.verdict.verdict == "failed to start"
    assert "out of memory" in failed.verdict.why
    assert outcome.state.incumbent["mem_fraction_static"] == 0.85
    # The trials after it start from the incumbent (graphs on, 0.85), not from the failure.
    after = engine.served[
        engine.served.index({**START, "cuda_graph": True, "mem_fraction_static": 0.92}) + 1 :
    ]
    assert after and all(s["mem_fraction_static"] == 0.85 and s["cuda_graph"] for s in after)


def test_a_killed_search_resumes_from_its_journal_and_decides_the_same(tmp_path):
    whole = search(tmp_path / "whole", Engine())

    class Killed(Exception):
        pass

    engine = Engine()
    calls = []

    def dies_after_three(step):
        if len(calls) == 3:
            raise Killed
        calls.append(step)
        return engine(step)

    with pytest.raises(Killed):
        search(tmp_path / "resumed", dies_after_three)
    said = []
    resumed = search(tmp_path / "resumed", engine, say=said.append)
    assert said[0].startswith("resuming the search") and "3 rounds already recorded" in said[0]
    assert [t.change for t in resumed.state.trials] == [t.change for t in whole.state.trials]
    assert resumed.state.incumbent == whole.state.incumbent
    assert len(engine.served) == len(whole.state.trials) + sum(
        t.rounds - 1 for t in whole.state.trials
    )


def test_a_journal_of_another_search_is_refused(tmp_path):
    search(tmp_path, Engine())
    with pytest.raises(JournalError, match="records another search"):
        run_search(
            small_space(),
            {**START, "chunked_prefill_size": 4096},
            Objective(1),
            tmp_path,
            Engine(),
            36000,
            600,
            say=lambda _: None,
        )
    rounds = [Round(0, 1, START, "ok", []), Round(1, 1, {**START, "cuda_graph": "x"}, "ok", [])]
    with pytest.raises(JournalMismatch, match="belongs to another search"):
        replay(small_space(), START, Objective(1), rounds)


def test_a_candidate_over_the_latency_limit_loses(tmp_path):
    fast = Measurement({1: [100.0, 101.0]}, {1: 9.0}, {1: 30.0})
    faster_but_slow_tokens = Measurement({1: [150.0, 151.0]}, {1: 12.0}, {1: 30.0})
    verdict = judge(fast, faster_but_slow_tokens, Objective(1, max_tpot_ms=10))
    assert verdict.verdict == "over the latency limit" and "12.0 ms > 10 ms" in verdict.why
    assert judge(fast, faster_but_slow_tokens, Objective(1)).verdict == "better"


def test_the_budget_refuses_a_search_whose_trial_cannot_fit_and_stops_a_long_one(tmp_path):
    with pytest.raises(TuneRefused, match="one trial can take up to 600 s"):
        search(tmp_path / "a", Engine(), budget=300)
    now, engine = [0.0], Engine()

    def takes_200_s(step):
        now[0] += 200
        return engine(step)

    said = []
    outcome = search(tmp_path / "b", takes_200_s, budget=700, clock=lambda: now[0], say=said.append)
    # The first round is judged by the bound (600 s), the rest by the measured 200 s: three fit.
    assert len(engine.served) == 3 and now[0] == 600
    assert "time budget (700 s) is spent: 600 s used, a trial takes ~200 s" in outcome.stopped
    assert outcome.state.next is not None  # what it would have run next
    assert said[0].startswith("trial 0: the starting settings; at most")
    assert budget_problem(1000, 0, 100, 600) == ""


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200" / "tune"


def real_search():
    table = tomllib.loads((REAL / "tune-space.toml").read_text())
    start = {name: table["start"].get(name) for name in table["search"]["order"]}
    return load_space(table), start, Objective(table["objective"]["concurrency"])


def test_the_real_h200_search_replays_to_graphs_on_and_the_rest_no_gain(tmp_path):
    """The journal the loop wrote beside real SGLang 0.5.17 over four device calls: replayed,
    it reaches the decisions that were made there, and finds nothing more to run."""
    space, start, objective = real_search()
    shutil.copy(REAL / JOURNAL_FILE, tmp_path / JOURNAL_FILE)
    rounds = open_journal(tmp_path, space, start, objective)
    state = replay(space, start, objective, rounds)
    assert state.next is None and state.stopped == ""
    assert [(t.change, t.verdict.verdict, t.rounds) for t in state.trials] == [
        ({}, "baseline", 1),
        ({"cuda_graph": True}, "better", 1),
        ({"mem_fraction_static": 0.8}, "worse", 1),
        ({"mem_fraction_static": 0.88}, "tie", 2),
        ({"chunked_prefill_size": 2048}, "worse", 1),
    ]
    graphs = state.trials[1]
    assert graphs.verdict.difference_pct == pytest.approx(362.4, abs=0.1)
    assert overrides_block({}, start, state) == "sglang_profile_overrides = {'cuda_graph': True}"
    # Resumed at any point, the search asks for exactly the round that came next there.
    for cut in range(len(rounds)):
        step = replay(space, start, objective, rounds[:cut]).next
        assert (step.trial, step.round, step.settings) == (
            rounds[cut].trial,
            rounds[cut].round,
            rounds[cut].settings,
        )


def test_progress_counts_only_the_trials_still_ahead():
    space, start, objective = real_search()
    rounds = open_journal(REAL, space, start, objective)
    # After the baseline and the graphs trial: 0.80, 0.88 and 2048 are left (this one included).
    assert replay(space, start, objective, rounds[:2]).remaining == 3
    assert replay(space, start, objective, rounds[:5]).remaining == 1


def test_turning_graphs_off_clears_the_graph_batch_size_it_required():
    space = small_space()
    incumbent = {**START, "cuda_graph": True, "cuda_graph_max_bs": 64}
    [off] = candidates(space.settings[0], incumbent, space)
    assert off == {**incumbent, "cuda_graph": False, "cuda_graph_max_bs": None}
    # The winner's block then clears it too, as an inventory override of null does.
    assert winning_overrides(incumbent, off) == {"cuda_graph": False, "cuda_graph_max_bs": None}


def test_moe_layouts_are_searched_only_for_moe_models_and_sizes_the_gpus_allow():
    from pyinfra_sglang.serving.profiles import load_profile

    space = load_space()
    glm5, dense = load_profile("glm-5-nvfp4"), load_profile("dense-bf16")
    on_eight = applicable(space, "0.5.23", "sm_120", profile=glm5, gpu_count=8)
    assert on_eight.names()[:3] == ["cuda_graph", "ep_size", "dp_attention_size"]
    assert on_eight.settings[1].values == (2, 4, 8)
    on_six = applicable(space, "0.5.23", "sm_120", profile=glm5, gpu_count=6)
    assert on_six.settings[1].values == (2,)  # 4 and 8 do not divide 6 GPUs
    one_gpu = applicable(space, "0.5.23", "sm_120", profile=glm5, gpu_count=1)
    assert "ep_size" not in one_gpu.names() and "dp_attention_size" not in one_gpu.names()
    dense_space = applicable(space, "0.5.23", "sm_90", profile=dense, gpu_count=8)
    assert "ep_size" not in dense_space.names() and "cuda_graph" in dense_space.names()


class CappedEngine(Engine):
    """A server whose baseline the diagnosis calls admission-capped, as the real H200 run
    with max_running_requests = 2 (tests/fixtures/sglang-0.5.17-h200/capped) was."""

    def __call__(self, step) -> Round:
        measured = super().__call__(step)
        headline = "admission-capped from c=8 (+98% over the one before)"
        return replace(
            measured, diagnosis=f"memory-bandwidth-bound at every concurrency; server: {headline}"
        )


def test_a_server_limit_the_baseline_names_moves_its_setting_first(tmp_path):
    space = load_space(
        {
            "search": {
                "order": ["cuda_graph", "mem_fraction_static", "max_running_requests"],
                "max_rounds": 3,
                "binds_first": {
                    "admission-capped": ["max_running_requests"],
                    "kv-capacity-bound": ["mem_fraction_static"],
                },
            },
            "settings": {
                "cuda_graph": {"values": [True, False]},
                "mem_fraction_static": {"values": [0.85, 0.92]},
                "max_running_requests": {"values": [2, 64]},
            },
        }
    )
    assert [s.name for s in space.order_for("memory-bandwidth-bound at every concurrency")] == [
        "cuda_graph",
        "mem_fraction_static",
        "max_running_requests",
    ]
    assert [s.name for s in space.order_for("x; server: kv-capacity-bound from c=64")] == [
        "mem_fraction_static",
        "cuda_graph",
        "max_running_requests",
    ]
    engine = CappedEngine()
    outcome = search(tmp_path, engine, space=space)
    # After the baseline, the cap first: the search's second and third servers change it.
    assert [s["max_running_requests"] for s in engine.served[1:3]] == [2, 64]
    # Resumed from its journal, the same order (the diagnosis is journaled).
    again = search(tmp_path, CappedEngine(), space=space)
    assert [t.change for t in again.state.trials] == [t.change for t in outcome.state.trials]


def test_binds_first_must_name_settings_of_the_space():
    with pytest.raises(ValueError, match=r"binds_first names no setting of \[settings\]: \['x'\]"):
        load_space(
            {
                "search": {"order": ["cuda_graph"], "max_rounds": 1, "binds_first": {"a": ["x"]}},
                "settings": {"cuda_graph": {"values": [True, False]}},
            }
        )
