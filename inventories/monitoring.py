"""Two 8x H100 SXM servers (dense bf16) and their monitoring: the first also runs
Prometheus and Grafana (`monitoring_role = "server"`), scraping both SGLang servers' /metrics,
a node exporter on each host, and the alert rules of data/monitoring.toml (docs/monitoring.md).

    uv run pyinfra-sglang validate inventories/monitoring.py
    uv run pyinfra inventories/monitoring.py deploy/site.py
    ssh -L 3000:localhost:3000 -L 9090:localhost:9090 root@10.0.0.11   # Grafana, Prometheus

Monitoring is off in every other example (monitoring_role defaults to "off"). Replace the
addresses and key files with yours; put each host's SSH key in known_hosts first
(docs/security.md). Prometheus and Grafana listen on loopback of the first host only; the
node exporters and the SGLang servers on each host's own address, which the first reaches;
an nftables table on each host admits only the first (10.0.0.11, its ssh_hostname) to the
node exporter's port (monitoring_firewall, on by default; docs/monitoring.md).
"""

_common = {
    "ssh_user": "root",
    "ssh_strict_host_key_checking": "yes",
    "ssh_known_hosts_file": "known_hosts",
    "expected_gpu_count": 8,
    "expected_gpu_model": "NVIDIA H100 80GB HBM3",
    "cuda_version": "13.0",
    "sglang_model_profile": "dense-bf16",
    # Served on the LAN, with the key; /metrics (no key) is scraped by the first host.
    "sglang_host": "0.0.0.0",
    "sglang_metrics_public": True,
    "sglang_api_key_file": "secrets/sglang-api-key",
}

gpu_servers = [
    (
        "h100-01.example.internal",
        {
            **_common,
            "ssh_hostname": "10.0.0.11",
            "monitoring_role": "server",
            # Grafana's admin password: one line, 0600 on the controller (never admin/admin).
            "grafana_admin_password_file": "secrets/grafana-admin-password",
        },
    ),
    ("h100-02.example.internal", {**_common, "ssh_hostname": "10.0.0.12"}),
]
