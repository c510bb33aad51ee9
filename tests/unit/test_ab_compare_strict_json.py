"""`pyinfra-sglang ab-compare --json` prints strict JSON: a difference against a side A of
0 tok/s has no percentage, so it is null (and "n/a" in the table), never Infinity or NaN."""

from __future__ import annotations

import json
import math

import pytest

from pyinfra_sglang.cli.main import main
from pyinfra_sglang.diagnosis import ab_compare as ab


def _folder(path, throughputs: list[tuple[int, float]]):
    path.mkdir(parents=True)
    lines = [{"max_concurrency": c, "output_throughput": t, "completed": 8} for c, t in throughputs]
    (path / "bench.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _strict(text: str):
    def refuse(constant):
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_side_a_of_zero_throughput_gives_null_not_infinity(tmp_path, capsys):
    a = _folder(tmp_path / "a", [(1, 0.0), (1, 0.0), (8, 100.0), (8, 100.0)])
    b = _folder(tmp_path / "b", [(1, 50.0), (1, 52.0), (8, 110.0), (8, 110.0)])
    assert main(["ab-compare", "--a", str(a), "--b", str(b), "--json"]) == 0
    out = capsys.readouterr().out
    assert "Infinity" not in out and "NaN" not in out
    rows = _strict(out)
    assert [(r["concurrency"], r["difference_pct"]) for r in rows] == [(1, None), (8, 10.0)]
    assert rows[0]["mean_a"] == 0.0 and rows[0]["verdict"] == "real"
    # The table says it has no percentage.
    assert main(["ab-compare", "--a", str(a), "--b", str(b)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "n/a" in table[1] and "inf" not in table[1] and "+10.0%" in table[2]


def test_both_sides_at_zero_are_no_difference(tmp_path, capsys):
    a = _folder(tmp_path / "a", [(4, 0.0), (4, 0.0)])
    b = _folder(tmp_path / "b", [(4, 0.0), (4, 0.0)])
    assert main(["ab-compare", "--a", str(a), "--b", str(b), "--json"]) == 0
    [row] = _strict(capsys.readouterr().out)
    assert row["difference_pct"] == 0.0 and row["verdict"] == "noise"


def test_the_json_has_no_non_finite_number_whatever_a_comparison_holds():
    odd = ab.Comparison(1, 2, 2, math.inf, -math.inf, math.nan, math.inf, 0.0, "real")
    row = _strict(ab.comparisons_json([odd]))[0]
    assert [row[k] for k in ("mean_a", "mean_b", "difference_pct", "spread_a_pct")] == [None] * 4
    assert row["spread_b_pct"] == 0.0 and row["concurrency"] == 1
    assert ab.percent(math.inf, True) == ab.percent(math.nan) == "n/a"
    assert ab.percent(5.0, True) == "+5.0%" and ab.percent(6.0) == "6.0%"


def test_json_dumps_refuses_rather_than_printing_nan(monkeypatch):
    monkeypatch.setattr(ab, "comparison_json", lambda c: {"x": math.nan})
    with pytest.raises(ValueError):
        ab.comparisons_json([None])


def test_the_ab_page_says_n_a_for_a_side_a_of_zero_throughput(tmp_path):
    from pyinfra_sglang.report.page import read_run, write_ab_report
    from tests.report_runs import host_run

    a, b = host_run(tmp_path), host_run(tmp_path, 2, "other")
    bench = a / "bench.jsonl"
    lines = [json.loads(text) for text in bench.read_text().splitlines()]
    bench.write_text("".join(json.dumps({**x, "output_throughput": 0.0}) + "\n" for x in lines))
    page = write_ab_report(read_run(a), read_run(b), tmp_path / "ab").read_text()
    assert "<td>n/a</td>" in page and "inf%" not in page
