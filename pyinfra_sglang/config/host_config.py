"""``HostConfig``: every value pyinfra-sglang reads from a host's data, one flat model
composed of one field group per role (config/fields/), as SGLang composes its server
arguments from ``srt/arg_groups/fields/``.

A group holds its fields with their defaults and the rules among them; what is left here is
the rules across groups (a public bind and its key, the ports a host listens on, a watchdog
in a multi-node group, the release and its CUDA) and the virtualenv path derived from three
groups. What needs more than one host's values, or renders the service, is checked above,
in inventory/validation.py and semantic_checks.py. How to add a field: config/types.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from pyinfra_sglang.config.fields.audit import AuditFields
from pyinfra_sglang.config.fields.bench import BenchFields
from pyinfra_sglang.config.fields.driver import DriverFields
from pyinfra_sglang.config.fields.model_download import ModelDownloadFields
from pyinfra_sglang.config.fields.monitoring import MonitoringFields
from pyinfra_sglang.config.fields.multinode import MultinodeFields
from pyinfra_sglang.config.fields.python_env import PythonEnvFields, versioned_venv_path
from pyinfra_sglang.config.fields.rollout import RolloutFields
from pyinfra_sglang.config.fields.router import RouterFields
from pyinfra_sglang.config.fields.service import ServiceFields
from pyinfra_sglang.config.fields.watchdog import WatchdogFields
from pyinfra_sglang.config.releases_read import unread_release
from pyinfra_sglang.config.types import control_characters, field_error
from pyinfra_sglang.python_env.python_stack import stack_problem

# Keys an inventory may carry for its own use: never read, never refused.
USER_KEY_PREFIX = "x_"

# The groups in the order of docs/inventory.md. pydantic lists the fields of the last base
# first, so HostConfig names them in reverse: its fields keep this order too.
FIELD_GROUPS = (
    DriverFields,
    ServiceFields,
    ModelDownloadFields,
    PythonEnvFields,
    MultinodeFields,
    RouterFields,
    RolloutFields,
    WatchdogFields,
    MonitoringFields,
    BenchFields,
    AuditFields,
)


class HostConfig(
    AuditFields,
    BenchFields,
    MonitoringFields,
    WatchdogFields,
    RolloutFields,
    RouterFields,
    MultinodeFields,
    PythonEnvFields,
    ModelDownloadFields,
    ServiceFields,
    DriverFields,
):
    """What pyinfra-sglang needs to know about one host; every field has a working default."""

    @model_validator(mode="before")
    @classmethod
    def _no_control_characters(cls, values: Any) -> Any:
        # Values end up in unit, env and YAML files: a newline would start a new setting, NUL
        # and CR make systemd refuse the unit. Checked before any field turns them into
        # something else (a URL parser drops tabs and newlines without a word).
        if isinstance(values, dict):
            for name, value in values.items():
                if control_characters(value):
                    raise field_error(
                        str(name),
                        "control characters (newline, tab, NUL, ...) cannot go into a unit, "
                        "env or config file",
                    )
        return values

    @model_validator(mode="before")
    @classmethod
    def _versioned_venv(cls, values: Any) -> Any:
        # A fixed path would be changed in place under the running server.
        if isinstance(values, dict) and values.get("venv_path") is None:
            release = {
                name: values.get(name) or cls.model_fields[name].default
                for name in ("sglang_version", "python_version", "cuda_version")
            }
            values = {**values, "venv_path": versioned_venv_path(**release)}
        return values

    @model_validator(mode="after")
    def _public_bind_needs_api_key(self) -> HostConfig:
        if not self.sglang_host.is_loopback and self.sglang_api_key_file is None:
            raise field_error(
                "sglang_host",
                f"binding to {self.sglang_host} (not loopback) without an API key; "
                "set sglang_api_key_file or bind to 127.0.0.1",
            )
        router = self.router_bind()
        if self.routed() and not router.is_loopback and self.sglang_router_api_key_file is None:
            raise field_error(
                "sglang_router_host",
                f"the router would bind to {router} (not loopback) without an API key, open "
                "to whoever reaches it; set sglang_router_api_key_file or bind it to 127.0.0.1",
            )
        return self

    @model_validator(mode="after")
    def _sglang_release_read(self) -> HostConfig:
        # A release no one read may spell a flag otherwise, or want another gateway: refused
        # before any change, unless the inventory accepts it (then semantic_checks warns).
        unread = unread_release(self.sglang_version, self.routed())
        if unread and not self.sglang_allow_unread_release:
            raise field_error("sglang_version", unread.refusal())
        return self

    @model_validator(mode="after")
    def _sglang_installs_for_the_cuda(self) -> HostConfig:
        # PyPI's SGLang kernel and PyTorch's builds exist for some CUDA majors only.
        problem = stack_problem(self.sglang_version, self.cuda_version)
        if problem:
            raise field_error("sglang_version", problem)
        return self

    @model_validator(mode="after")
    def _watchdog_restarts_one_server(self) -> HostConfig:
        # A multi-node group starts, stops and rolls back as one (the deploy coordinates its
        # members from the controller); a watchdog on one member would restart it alone.
        if self.sglang_watchdog and self.sglang_multinode_group:
            raise field_error(
                "sglang_watchdog",
                f"a member of multi-node group {self.sglang_multinode_group} restarts only "
                "with its group (the deploy's rank-0-first order); a watchdog restarts one "
                "host alone. Allowed: false for multi-node members",
            )
        return self

    @model_validator(mode="after")
    def _one_listener_per_port(self) -> HostConfig:
        # The ports this host listens on (the router's only where it runs, the rendezvous
        # only in a multi-node group) must differ: a second listener on a port fails to start.
        in_use = {"sglang_port": self.sglang_port}
        if self.routed():
            in_use["sglang_router_port"] = self.sglang_router_port
            in_use["sglang_router_metrics_port"] = self.sglang_router_metrics_port
        if self.sglang_multinode_group:
            in_use["sglang_dist_init_port"] = self.sglang_dist_init_port
        seen: dict[int, str] = {}
        for name, port in in_use.items():
            if port in seen:
                raise field_error(
                    name,
                    f"port {port} is also {seen[port]}; each listener of a host needs its own "
                    f"port ({', '.join(in_use)})",
                )
            seen[port] = name
        return self


def field_allowed(name: str) -> str:
    extra = HostConfig.model_fields[name].json_schema_extra or {}
    return str(extra.get("allowed", ""))  # type: ignore[union-attr]


def ab_side_b(config: HostConfig) -> HostConfig:
    """The host's config with bench_ab_overrides laid over its profile overrides: what side
    B of an A/B serves."""
    overrides = {**config.sglang_profile_overrides, **config.bench_ab_overrides}
    return config.model_copy(update={"sglang_profile_overrides": overrides})
