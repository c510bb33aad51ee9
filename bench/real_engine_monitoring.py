"""Real Prometheus scraping the real SGLang server on the H200 machine, with the project's own
rendered prometheus.yml and alert rules (pyinfra_sglang/monitoring/), during a benchmark.

Three parts, as bench/real_engine.py has them:

- ``prepare`` (here, with the project): the monitoring files for a one-host inventory of the
  scenario (the host is also the monitoring server, at 127.0.0.1), written into the run
  folder, with the scrape and evaluation interval at 2 s (a run of minutes at 15 s gives a
  handful of points; that is the one change to the rendered file), and the queries to ask
  afterwards: each alert rule's expression, Prometheus's ``ALERTS`` series, and the panels of
  the Grafana dashboard file given (``--dashboard``; SGLang's own, as the role downloads it),
  with Grafana's variables in their plain meaning (``$__rate_interval``: 30 s, a template
  variable: every value).
- ``device`` (the GPU machine, standard library only): Debian's Prometheus binary (carried
  xz-packed as ``.promkit/prometheus.xz``: Debian 12's ``prometheus`` package, 2.42.0) started
  on loopback before the benchmark, asked afterwards for its targets, rules, alerts and every
  query over the run (query_range, 2 s steps); a /metrics capture of the server mid-run.
- ``picture`` (here): one chart per panel from what Prometheus answered: the dashboard as the
  run filled it (matplotlib, Agg), and the alerts' states over the run.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

PROMETHEUS = "http://127.0.0.1:9090"
INTERVAL_S = 2
RATE_INTERVAL = "30s"


# --- prepare (here) --------------------------------------------------------------------------


def prepare(run: Path, scenario: str, config, dashboard: Path | None) -> None:
    """Write ``run/<scenario>-monitoring/``: prometheus.yml, the rules and queries.json."""
    from pyinfra_sglang.monitoring import render
    from pyinfra_sglang.monitoring.targets import InventoryHost, monitoring_plan
    from pyinfra_sglang.serving.host_profile import host_profile

    folder = run / f"{scenario}-monitoring"
    folder.mkdir(parents=True, exist_ok=True)
    config = config.model_copy(update={"monitoring_role": "server"})
    profile = host_profile(config)
    host = InventoryHost(
        name="h200",
        address="127.0.0.1",
        config=config,
        max_running_requests=profile.max_running_requests,
    )
    plan = monitoring_plan([host], {"h200": bool(profile.enable_metrics)})
    every = f"{INTERVAL_S}s"
    text = render.prometheus_config(plan, "127.0.0.1")
    text = re.sub(r"(scrape|evaluation)_interval: \d+s", rf"\1_interval: {every}", text)
    (folder / "prometheus.yml").write_text(text)
    (folder / "sglang-alerts.yml").write_text(render.alert_rules_file(plan))
    queries = [
        {"panel": f"alert {rule.name}", "legend": rule.name, "expr": rule.expr}
        for rule in render.alert_rules(plan)
    ]
    queries.append({"panel": "ALERTS", "legend": "{alertname} {alertstate}", "expr": "ALERTS"})
    if dashboard is not None:
        board = json.loads(dashboard.read_text())
        for panel in _panels(board):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    queries.append(
                        {
                            "panel": panel.get("title", "?"),
                            "legend": target.get("legendFormat", ""),
                            "expr": grafana_plain(target["expr"]),
                        }
                    )
    (folder / "queries.json").write_text(json.dumps(queries, indent=2))


def _panels(board: dict) -> list[dict]:
    found = []
    for panel in board.get("panels", []):
        found.append(panel)
        found += panel.get("panels", [])
    return found


def grafana_plain(expr: str) -> str:
    """A Grafana query as Prometheus takes it: $__rate_interval as 30 s, a template variable
    as every value (``=~".*"``)."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", RATE_INTERVAL)
    return re.sub(r"\$\{?\w+\}?", ".*", expr).strip()


# --- device (the GPU machine, standard library only) -----------------------------------------


class Prometheus:
    def __init__(self, kit: Path, folder: Path, out: Path):
        self.kit, self.folder, self.out = kit, folder, out
        self.proc = None

    def start(self) -> bool:
        binary = Path("/tmp/prom/prometheus")
        if not binary.is_file():
            binary.parent.mkdir(parents=True, exist_ok=True)
            binary.write_bytes(lzma.decompress((self.kit / "prometheus.xz").read_bytes()))
            binary.chmod(0o755)
        config_dir = Path("/tmp/prom/etc")
        shutil.rmtree(config_dir, ignore_errors=True)
        config_dir.mkdir(parents=True)
        rules = config_dir / "sglang-alerts.yml"
        shutil.copy(self.folder / "sglang-alerts.yml", rules)
        text = (self.folder / "prometheus.yml").read_text()
        # The rendered file names the rules where the role puts them (/etc/prometheus).
        text = re.sub(r"rule_files:\n  - .*\n", f'rule_files:\n  - "{rules}"\n', text)
        (config_dir / "prometheus.yml").write_text(text)
        shutil.rmtree("/tmp/prom/data", ignore_errors=True)
        log = open(self.out / "prometheus.log", "w")  # noqa: SIM115 (open while it runs)
        self.proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={config_dir / 'prometheus.yml'}",
                "--storage.tsdb.path=/tmp/prom/data",
                "--web.listen-address=127.0.0.1:9090",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{PROMETHEUS}/-/ready", timeout=2)
                return True
            except OSError:
                time.sleep(0.5)
        return False

    def get(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{PROMETHEUS}{path}?{query}", timeout=30) as answer:
            return json.loads(answer.read())

    def collect(self, start: float, end: float) -> dict:
        """Targets, rules, alerts, and every query over [start, end]."""
        found = {
            "window": [start, end],
            "targets": self.get("/api/v1/targets"),
            "rules": self.get("/api/v1/rules"),
            "alerts": self.get("/api/v1/alerts"),
            "tsdb": self.get("/api/v1/status/tsdb"),
            "series_now": self.get("/api/v1/query", query='count by (job) ({__name__=~".+"})'),
            "appended": self.get(
                "/api/v1/query", query="prometheus_tsdb_head_samples_appended_total"
            ),
            "queries": [],
        }
        for query in json.loads((self.folder / "queries.json").read_text()):
            try:
                answer = self.get(
                    "/api/v1/query_range",
                    query=query["expr"],
                    start=f"{start:.3f}",
                    end=f"{end:.3f}",
                    step=f"{INTERVAL_S}s",
                )
            except OSError as error:  # a query Prometheus refuses answers 400
                body = getattr(error, "read", lambda: b"")()
                answer = {"status": "error", "error": f"{error}: {body[:300]!r}"}
            instant = self.get("/api/v1/query", query=query["expr"], time=f"{end - 30:.3f}")
            found["queries"].append({**query, "answer": answer, "instant": instant})
        return found

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# What Prometheus 2.42 asks for (scrape/scrape.go's acceptHeader): OpenMetrics first.
SCRAPE_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def capture_metrics(url: str, out: Path) -> None:
    """The server's /metrics once as plain text and once as Prometheus asks for it (a fixture
    of this release's names and labels)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        (out / "metrics.txt").write_bytes(answer.read())
    request = urllib.request.Request(f"{url}/metrics", headers={"Accept": SCRAPE_ACCEPT})
    with urllib.request.urlopen(request, timeout=10) as answer:
        kind = answer.headers.get("Content-Type", "")
        (out / "metrics-openmetrics.txt").write_bytes(f"# {kind}\n".encode() + answer.read())


# --- picture (here) --------------------------------------------------------------------------


def picture(collected: Path, output: Path) -> str:
    """One chart per panel of what Prometheus answered; returns a line per panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = json.loads(collected.read_text())
    start = found["window"][0]
    panels: dict[str, list[dict]] = {}
    for query in found["queries"]:
        panels.setdefault(query["panel"], []).append(query)
    drawn = [name for name in panels if not name.startswith("alert ")]
    columns = 3
    rows = -(-len(drawn) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(15, 3.2 * rows), squeeze=False)
    lines = []
    for ax, name in zip(axes.flat, drawn):
        series_count = 0
        for query in panels[name]:
            answer = query["answer"]
            if answer.get("status") != "success":
                lines.append(f"{name}: refused: {answer.get('error')}")
                continue
            for series in answer["data"]["result"]:
                points = series["values"]
                label = _legend(query["legend"], series["metric"])
                xs = [float(t) - start for t, _ in points]
                ys = [float(v) for _, v in points]
                ax.plot(xs, ys, label=label[:40], linewidth=1)
                series_count += 1
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("s since the benchmark began", fontsize=7)
        if 0 < series_count <= 6:
            ax.legend(fontsize=6)
        lines.append(f"{name}: {series_count} series")
    for ax in list(axes.flat)[len(drawn) :]:
        ax.axis("off")
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=80)
    plt.close(figure)
    return "\n".join(lines)


def _legend(template: str, labels: dict) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)
    text = re.sub(r"\{(\w+)\}", lambda m: labels.get(m.group(1), m.group(0)), text)
    return text or ",".join(f"{k}={v}" for k, v in labels.items() if k != "__name__") or "value"


def prometheus_kit() -> Path:
    return Path(os.environ.get("PROMKIT", ".promkit"))
