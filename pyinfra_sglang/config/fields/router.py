"""SGLang's router in front of data-parallel replicas, and rolling restarts behind it
(roles/sglang_service.py, service_apply.py)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Annotated, Self

from pydantic import BeforeValidator, Field, HttpUrl, model_validator

from pyinfra_sglang.config.types import (
    FieldGroup,
    OptionalPath,
    PlainIP,
    Port,
    allowed,
    field_error,
    no_bool,
)


class RouterFields(FieldGroup):
    """SGLang's router in front of replicas, and rolling restarts behind it."""

    sglang_router_worker_urls: list[HttpUrl] = Field(
        default_factory=list,
        description=(
            "Data-parallel replicas to put SGLang's router in front of; when set, this host "
            "runs the router unit too."
        ),
        json_schema_extra=allowed("a list of http(s) URLs of SGLang servers"),
    )

    sglang_rolling_batch: Annotated[int, BeforeValidator(no_bool)] = Field(
        1,
        ge=1,
        description=(
            "How many servers behind one router a deploy restarts at once: each waits for "
            "health before the next starts, the others keep serving. Servers behind no "
            "router restart together."
        ),
        json_schema_extra=allowed("a whole number, 1 or more"),
    )

    sglang_router_host: PlainIP | None = Field(
        None,
        description=(
            "Address the router binds to; unset: 127.0.0.1, or `sglang_host` when that is a "
            "loopback address itself. Its Prometheus metrics listen on loopback only."
        ),
        json_schema_extra=allowed(
            "an IP address, or unset; a non-loopback one needs sglang_router_api_key_file"
        ),
    )

    sglang_router_port: Port = Field(
        30080,
        description="TCP port of the router, on `sglang_router_host`.",
        json_schema_extra=allowed("1..65535"),
    )

    sglang_router_api_key_file: OptionalPath = Field(
        None,
        description=(
            "File on the controller holding the router's API key: clients must present it, and "
            "the router presents it to the workers (give them the same key). Written 0600 on "
            "the host, never on a command line."
        ),
        json_schema_extra=allowed("a path on the controller, or unset"),
    )

    sglang_router_metrics_port: Port = Field(
        29000,
        description=(
            "Port of the router's Prometheus metrics, on loopback (the router's own address "
            "when that is loopback, else 127.0.0.1)."
        ),
        json_schema_extra=allowed("1..65535"),
    )

    def routed(self) -> bool:
        """Does this host run SGLang's router?"""
        return bool(self.sglang_router_worker_urls)

    def router_bind(self) -> IPv4Address | IPv6Address:
        """The router's address: sglang_router_host; unset, the server's own address when
        that is a loopback address, else 127.0.0.1."""
        if self.sglang_router_host is not None:
            return self.sglang_router_host
        return self.sglang_host if self.sglang_host.is_loopback else ip_address("127.0.0.1")

    def router_metrics_bind(self) -> IPv4Address | IPv6Address:
        """The router's Prometheus listener: the router's address when that is loopback, else
        127.0.0.1; never reachable from another host."""
        bind = self.router_bind()
        return bind if bind.is_loopback else ip_address("127.0.0.1")

    @model_validator(mode="after")
    def _router_not_its_own_worker(self) -> Self:
        # A worker URL that is the router's own address: every request proxied to itself.
        if not self.sglang_router_worker_urls:
            return self
        bind = self.router_bind()
        own = {(str(bind), self.sglang_router_port)}
        if bind.is_loopback or bind.is_unspecified:
            own |= {(name, self.sglang_router_port) for name in ("127.0.0.1", "::1", "localhost")}
        for url in self.sglang_router_worker_urls:
            host = (url.host or "").strip("[]")
            try:
                host = str(ip_address(host))
            except ValueError:
                pass
            if (host, url.port) in own:
                raise field_error(
                    "sglang_router_worker_urls",
                    f"{url} is the router's own address (sglang_router_host "
                    f"{bind}, sglang_router_port {self.sglang_router_port}): it would proxy "
                    "every request to itself; name the SGLang servers' URLs",
                )
        return self
