"""Monitoring (monitoring_role) on real Debian 12 test hosts serving the stand-in SGLang,
which replays a real /metrics of SGLang 0.5.17 (one scrape of the H200 capture): Debian's own
prometheus and prometheus-node-exporter from Debian's archive, installed by
deploy/site.py on the first host (the monitoring server) and the node exporter on both; on
the second, with nvidia_dcgm_install, DCGM and NVIDIA's DCGM exporter from the stand-in
NVIDIA repository (tests/hosts/aptrepo.py: real names and files, an exporter serving its
counters file's fields); the test asks the real Prometheus's HTTP API for its targets and
each server's series; a stopped server fires SglangServerDown (pending, then firing after
its `for:`); a second apply changes nothing; the audit's monitoring line reads Prometheus's
targets."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.hosts.apply import apply, write_inventory
from tests.hosts.audit_report import findings

pytestmark = pytest.mark.hosts

PACKAGES = "prometheus prometheus-node-exporter"
# On the second host: DCGM for the site's cuda_version (13.1) and its exporter.
DCGM_PACKAGES = "datacenter-gpu-manager-exporter datacenter-gpu-manager-4-cuda13"
DCGM_DROPIN = "/etc/systemd/system/nvidia-dcgm-exporter.service.d"
# A real /metrics of SGLang 0.5.17 (one scrape), which the stand-in server replays.
CAPTURE = (
    Path(__file__).resolve().parents[1] / "fixtures/sglang-0.5.17-h200/tiny/metrics-no-key.txt"
)
REPLAY = "/run/sglang-standin/30000.metrics"
# The families SGLang's own Grafana dashboard queries (docs/sources.md, Monitoring).
DASHBOARD_FAMILIES = (
    "sglang:e2e_request_latency_seconds_bucket",
    "sglang:time_to_first_token_seconds_bucket",
    "sglang:num_running_reqs",
    "sglang:gen_throughput",
    "sglang:cache_hit_rate",
    "sglang:num_queue_reqs",
)


def _api(prometheus: str, path: str, **query: str) -> dict:
    url = f"{prometheus}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def _targets(prometheus: str) -> list[dict]:
    return _api(prometheus, "/api/v1/targets", state="active")["data"]["activeTargets"]


def _query(prometheus: str, expr: str) -> list[dict]:
    return _api(prometheus, "/api/v1/query", query=expr)["data"]["result"]


def _wait(what: str, check, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as error:  # Prometheus (re)starting
            last = error
        if last and not isinstance(last, OSError):
            return last
        time.sleep(3)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {last})")


def _listening(host_pool, h, port: int) -> list[str]:
    """The local addresses listening on TCP `port` in the host's namespace."""
    lines = host_pool.run(h, f"ss -ltnH 'sport = :{port}'").stdout.splitlines()
    return [line.split()[3] for line in lines if line.strip()]


@pytest.fixture
def monitoring_inventory(tmp_path, site_hosts, site_data, inventory):
    """The site hosts, the first the monitoring server (Grafana left out: its own test),
    the second with DCGM."""
    first, second = site_hosts
    # Test hosts sharing this machine's network: no metrics firewall (validation refuses one
    # there, as it would filter the machine's own namespace; its own test has private hosts).
    site_data = {**site_data, "monitoring_firewall": False}
    server = {
        **site_data,
        "sglang_host": first.address,
        "monitoring_role": "server",
        "monitoring_grafana": False,
        "monitoring_listen_address": first.address,
        "monitoring_exporter_address": first.address,
    }
    other = {
        **site_data,
        "sglang_host": second.address,
        "monitoring_exporter_address": second.address,
        "nvidia_dcgm_install": True,
    }
    return write_inventory(
        tmp_path / "monitoring.py",
        {"gpu_hosts": [(first.address, server), (second.address, other)]},
    )


def test_prometheus_scrapes_every_server_alerts_on_a_stopped_one_then_nothing_changes(
    host_pool, site_hosts, monitoring_inventory, tmp_path
):
    first, second = site_hosts
    prometheus = f"http://{first.address}:9090"
    capture = CAPTURE.read_text()
    try:
        for h in site_hosts:
            host_pool.run(h, f"cat > {REPLAY} <<'CAPTURE'\n{capture}CAPTURE\n")
        applied = apply(monitoring_inventory)
        assert applied.returncode == 0 and not applied.errors(), applied.describe()
        changed = applied.changed(first.address)
        assert changed and all(op.startswith("Monitoring |") for op in changed), changed
        # Just started by this run: a SIGHUP now could end it before it handles one.
        assert "Monitoring | Reload Prometheus's config" not in changed, changed
        changed = applied.changed(second.address)
        assert all(op.startswith(("Monitoring |", "DCGM |")) for op in changed), changed
        assert "Monitoring | Install the DCGM exporter" in changed, changed
        for h in site_hosts:
            status = host_pool.run(
                h, "dpkg-query -W -f '${Status}' prometheus-node-exporter"
            ).stdout
            assert status == "install ok installed"
            # Only where the inventory says. A service systemd has just started may not
            # listen yet: each listener is awaited with a deadline, never read once.
            _wait(f"node exporter on {h.address}:9100", lambda h=h: _listening(host_pool, h, 9100))
            assert f"{h.address}:9100" in _listening(host_pool, h, 9100)
        try:
            _wait(f"prometheus on {first.address}:9090", lambda: _listening(host_pool, first, 9090))
        except AssertionError as error:
            journal = host_pool.run(
                first, "systemctl status --no-pager -n 30 prometheus", check=False
            ).stdout
            raise AssertionError(f"{error}\n{journal}") from None
        assert f"{first.address}:9090" in _listening(host_pool, first, 9090)
        assert host_pool.run(second, "command -v prometheus", check=False).returncode != 0
        # The DCGM exporter: on the second host only, where the plan scrapes it (the hosts
        # share one network namespace: one listener in all).
        exporter = "dpkg-query -W -f '${Status}' datacenter-gpu-manager-exporter"
        assert host_pool.run(second, exporter).stdout == "install ok installed"
        assert host_pool.run(first, exporter, check=False).stdout != "install ok installed"
        _wait("the DCGM exporter on :9400", lambda: _listening(host_pool, second, 9400))
        assert _listening(host_pool, second, 9400) == [f"{second.address}:9400"]

        def all_up():
            found = {
                (t["labels"]["job"], t["labels"]["host"], t["health"]) for t in _targets(prometheus)
            }
            wanted = {("prometheus", first.address, "up"), ("dcgm", second.address, "up")} | {
                (job, h.address, "up") for job in ("sglang", "node") for h in site_hosts
            }
            return found if found == wanted else None

        _wait("every target up", all_up)
        for expr in (*DASHBOARD_FAMILIES, "sglang:token_usage", "node_uname_info"):
            series = _query(prometheus, expr)
            assert {s["metric"]["host"] for s in series} == {h.address for h in site_hosts}, expr
        [temperature] = _query(prometheus, "DCGM_FI_DEV_GPU_TEMP")
        assert temperature["metric"]["job"] == "dcgm" and temperature["metric"]["gpu"] == "0"
        assert temperature["metric"]["host"] == second.address, temperature
        rules = _api(prometheus, "/api/v1/rules")["data"]["groups"][0]["rules"]
        assert "SglangServerDown" in {rule["name"] for rule in rules}

        again = apply(monitoring_inventory)
        again.assert_unchanged()

        report_dir = tmp_path / "audit"
        options = ("--data", f"audit_report_dir={report_dir}")
        apply(monitoring_inventory, "deploy/audit.py", options=options)
        [line] = findings(report_dir, first.address)["monitoring"]
        assert line["level"] == "ok" and line["message"].startswith("all 6 targets up"), line
        assert "monitoring" not in findings(report_dir, second.address)

        host_pool.run(second, "systemctl stop sglang")

        def alert():
            found = _query(prometheus, 'ALERTS{alertname="SglangServerDown"}')
            return [a["metric"] for a in found if a["metric"].get("host") == second.address]

        [pending] = _wait("SglangServerDown for the stopped server", alert)
        assert pending["alertstate"] in ("pending", "firing"), pending
        assert pending["severity"] == "critical"

        apply(monitoring_inventory, "deploy/audit.py", options=options)
        [line] = findings(report_dir, first.address)["monitoring"]
        assert line["level"] == "warn", line
        assert f"sglang {second.address}:30000 ({second.address})" in line["message"], line
    finally:
        host_pool.run(second, "systemctl start sglang", check=False)
        for h in site_hosts:
            host_pool.run(h, f"rm -f {REPLAY}", check=False)
        host_pool.run(
            second,
            "systemctl disable --now nvidia-dcgm-exporter nvidia-dcgm 2>/dev/null; "
            f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {DCGM_PACKAGES} >/dev/null; "
            f"rm -rf {DCGM_DROPIN} /var/log/dcgm-exporter.log",
            check=False,
        )
        for h in site_hosts:
            host_pool.run(
                h,
                f"systemctl disable --now prometheus prometheus-node-exporter 2>/dev/null; "
                f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {PACKAGES} >/dev/null; "
                "rm -f /etc/default/prometheus /etc/default/prometheus-node-exporter; "
                "rm -rf /etc/prometheus; systemctl daemon-reload",
                check=False,
            )
