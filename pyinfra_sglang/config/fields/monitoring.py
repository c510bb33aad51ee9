"""Monitoring: the Prometheus and Grafana host, the exporters and their firewall
(roles/monitoring.py, monitoring_firewall.py; pyinfra_sglang/monitoring/)."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, HttpUrl, StrictBool, model_validator

from pyinfra_sglang.config.types import (
    FieldGroup,
    OptionalPath,
    PlainIP,
    allowed,
    apt_line_fits,
    field_error,
)


class MonitoringFields(FieldGroup):
    """Monitoring: Prometheus, Grafana, the exporters and their firewall."""

    monitoring_role: Literal["off", "server"] = Field(
        "off",
        description=(
            "`server`: this host runs Prometheus (and Grafana) scraping every SGLang server, "
            "router, node exporter and DCGM exporter of the inventory, with the alert rules "
            "of data/monitoring.toml. With one such host in the inventory, every other host "
            "runs a node exporter on `monitoring_exporter_address`. `off`: no monitoring "
            "server here (docs/monitoring.md)."
        ),
        json_schema_extra=allowed("off, server"),
    )

    monitoring_listen_address: PlainIP = Field(
        IPv4Address("127.0.0.1"),
        description=(
            "Address Prometheus and Grafana listen on, on the monitoring host: loopback "
            "only (Prometheus has no authentication); reach them through an SSH tunnel "
            "(`ssh -L 3000:localhost:3000 host`)."
        ),
        json_schema_extra=allowed("a loopback IP address (127.0.0.0/8, ::1)"),
    )

    monitoring_exporter_address: PlainIP | None = Field(
        None,
        description=(
            "Address this host's node exporter (and DCGM exporter, with "
            "`nvidia_dcgm_install`) listens on, for the monitoring host to scrape. Unset: "
            "127.0.0.1 on the monitoring host itself, else the host's address (ssh_hostname, "
            "else its name) when that is an IP address."
        ),
        json_schema_extra=allowed("an IP address, or unset"),
    )

    monitoring_firewall: StrictBool = Field(
        True,
        description=(
            "With a monitoring server in the inventory, an nftables table on this host that "
            "drops new connections to the node exporter's port (and the DCGM exporter's, "
            "with `nvidia_dcgm_install`) from anywhere but loopback and the monitoring "
            "server. SGLang's /metrics shares the API port and is not filtered "
            "(docs/monitoring.md). `false`, or no monitoring server: the table is removed."
        ),
        json_schema_extra=allowed("true, false"),
    )

    monitoring_scrape_address: PlainIP | None = Field(
        None,
        description=(
            "On the monitoring server: the address its scrapes come from, the one the other "
            "hosts' metrics firewall admits. Unset: the server's address (ssh_hostname, else "
            "its name) when that is an IP address; set it when that is a name, or when the "
            "server reaches the other hosts from another interface."
        ),
        json_schema_extra=allowed("an IP address, or unset"),
    )

    grafana_admin_password_file: OptionalPath = Field(
        None,
        description=(
            "File on the controller holding Grafana's admin password (one line): written "
            "root:grafana 0640 on the monitoring host, never on a command line. Needed with "
            '`monitoring_role = "server"` and `monitoring_grafana`.'
        ),
        json_schema_extra=allowed("a path on the controller, or unset"),
    )

    monitoring_grafana: StrictBool = Field(
        True,
        description=(
            "On the monitoring host, Grafana from Grafana's apt repository with a Prometheus "
            "datasource, SGLang's dashboard for `sglang_version` and a GPU dashboard."
        ),
        json_schema_extra=allowed("true, false"),
    )

    monitoring_grafana_apt_url: Annotated[HttpUrl, AfterValidator(apt_line_fits)] | None = Field(
        None,
        description=(
            "A mirror of Grafana's apt repository (suite stable, component main); unset: "
            "https://apt.grafana.com."
        ),
        json_schema_extra=allowed("an http(s) URL, or unset"),
    )

    monitoring_grafana_key_url: HttpUrl | None = Field(
        None,
        description=(
            "Where the repository's signing key is downloaded from; unset: "
            "https://apt.grafana.com/gpg.key."
        ),
        json_schema_extra=allowed("an http(s) URL, or unset"),
    )

    monitoring_grafana_key_fingerprint: Annotated[str, Field(pattern=r"^[0-9A-F]{40}$")] | None = (
        Field(
            None,
            description=(
                "Fingerprint of the only key taken from the downloaded key file (a mirror that "
                "signs with its own key); unset: Grafana's, pinned in data/monitoring.toml."
            ),
            json_schema_extra=allowed("40 upper-case hex digits, or unset"),
        )
    )

    monitoring_sglang_dashboard_url: HttpUrl | None = Field(
        None,
        description=(
            "Where SGLang's Grafana dashboard is downloaded from; unset: SGLang's repository "
            "at the tag of `sglang_version` (data/monitoring.toml)."
        ),
        json_schema_extra=allowed("an http(s) URL, or unset"),
    )

    @model_validator(mode="after")
    def _grafana_needs_a_password(self) -> Self:
        if (
            self.monitoring_role == "server"
            and self.monitoring_grafana
            and self.grafana_admin_password_file is None
        ):
            raise field_error(
                "grafana_admin_password_file",
                'monitoring_role = "server" installs Grafana, whose admin password comes from '
                "this file (never admin/admin); set it, or monitoring_grafana: false",
            )
        return self

    @model_validator(mode="after")
    def _prometheus_stays_on_loopback(self) -> Self:
        # Prometheus's API has no authentication unless a --web.config.file gives one, which
        # the role does not render: off loopback it would serve every scraped series and
        # take any query from whoever reaches the port.
        if self.monitoring_role == "server" and not self.monitoring_listen_address.is_loopback:
            raise field_error(
                "monitoring_listen_address",
                f"Prometheus on {self.monitoring_listen_address} would answer anyone who "
                "reaches it, without authentication; keep it on loopback and reach Prometheus "
                "and Grafana through an SSH tunnel (ssh -L 3000:localhost:3000 "
                "-L 9090:localhost:9090 HOST), or put an authenticating proxy in front of it",
            )
        return self
