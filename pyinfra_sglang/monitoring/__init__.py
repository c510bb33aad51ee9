"""Monitoring (inventory ``monitoring_role``): the scrape targets the inventory implies, the
Prometheus configuration and alert rules rendered from them and data/monitoring.toml, the
Grafana provisioning files. Pure: no host is contacted (roles/monitoring.py applies them)."""
