"""The SGLang server: its release, profile, address, key, environment and the GPUs it is
planned for (roles/sglang_service.py; serving/)."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BeforeValidator, Field, StrictBool, model_validator

from pyinfra_sglang import data
from pyinfra_sglang.config.types import (
    RELEASE_PATTERN,
    FieldGroup,
    OptionalPath,
    PlainIP,
    Port,
    allowed,
    field_error,
    no_bool,
    one_of,
    version_text,
)
from pyinfra_sglang.gpu_links.p2p import check_p2p_env
from pyinfra_sglang.gpus import UnknownGpuError, gpu_by_name, gpu_names

_flags_read = data.sglang_flags().versions
# The release a host gets when its inventory names none.
SGLANG_DEFAULT = "0.5.23"


def _known_gpu_model(value: str | None) -> str | None:
    # The table's own name, so it compares with what nvidia-smi prints.
    if value is None:
        return None
    try:
        return gpu_by_name(value).name
    except UnknownGpuError as error:
        raise ValueError(str(error)) from None


class ServiceFields(FieldGroup):
    """The SGLang server: release, profile, address, key, environment, planned GPUs."""

    sglang_version: Annotated[str, version_text(SGLANG_DEFAULT), Field(pattern=RELEASE_PATTERN)] = (
        Field(
            SGLANG_DEFAULT,
            description="SGLang release pinned in the virtualenv.",
            json_schema_extra=allowed(
                f"a release from {_flags_read.oldest_read} to {_flags_read.newest_read} (the "
                "releases read: data/sglang_flags.toml [versions]) such as 0.5.23 or 0.5.9.post1; "
                "another only with sglang_allow_unread_release"
            ),
        )
    )

    sglang_allow_unread_release: StrictBool = Field(
        False,
        description=(
            "Accept an `sglang_version` outside the releases read (data/sglang_flags.toml "
            "[versions]: the flag spellings, and with a router the router pins): the service "
            "is rendered with the spellings of the nearest release read and the newest "
            "router pin, unchecked against that release's parser, and validation warns. "
            "Off: such a release is refused."
        ),
        json_schema_extra=allowed("true, false"),
    )

    sglang_model_profile: Annotated[
        str, Field(pattern=r"^[a-z0-9][a-z0-9.-]*$", max_length=200)
    ] = Field(
        "glm-5-nvfp4",
        description="Model profile (model, quantization, backends, tuned flags) to serve.",
        json_schema_extra=allowed("a profile name: lowercase letters, digits, '.', '-'"),
    )

    sglang_host: PlainIP = Field(
        ip_address("127.0.0.1"),
        description="Address the SGLang server binds to.",
        json_schema_extra=allowed("an IP address; a non-loopback one needs sglang_api_key_file"),
    )

    sglang_port: Port = Field(
        30000,
        description="TCP port of the SGLang server.",
        json_schema_extra=allowed("1..65535"),
    )

    sglang_api_key_file: OptionalPath = Field(
        None,
        description="File on the controller holding the API key (written 0600 on the host).",
        json_schema_extra=allowed("a path on the controller, or unset"),
    )

    sglang_profile_dirs: list[str] = Field(
        default_factory=list,
        description=(
            "Folders (relative to where pyinfra runs) searched for model profiles before the "
            "built-in ones: add profiles without touching code."
        ),
        json_schema_extra=allowed("a list of folder paths"),
    )

    sglang_profile_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            'Profile values this host overrides, e.g. `{"model": "/models/glm-5", '
            '"tp_size": 4, "mem_fraction_static": 0.9}` (tp_size pins tensor parallelism).'
        ),
        json_schema_extra=allowed("a mapping of profile fields to values"),
    )

    sglang_env: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
        Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f]*$")],
    ] = Field(
        default_factory=dict,
        description=(
            "Environment variables of this host's SGLang server, over the profile's env and the "
            'NCCL hints read from the host, e.g. `{"NCCL_P2P_LEVEL": "SYS"}` or '
            '`{"NCCL_P2P_DISABLE": "1"}` (either one replaces the P2P hint). Not for the '
            "variables pyinfra-sglang sets itself (caches, PATH, CUDA_HOME, HF_TOKEN, HF_HUB_*)."
        ),
        json_schema_extra=allowed("a mapping of variable names to one-line values"),
    )

    sglang_metrics_public: StrictBool = Field(
        False,
        description=(
            "May the server's unauthenticated /metrics and /health_generate be reached on a "
            "non-loopback sglang_host? SGLang serves them without the API key; a public bind "
            "with the profile's enable_metrics on is refused unless this is true."
        ),
        json_schema_extra=allowed("true, false"),
    )

    expected_gpu_count: Annotated[int | None, BeforeValidator(no_bool)] = Field(
        None,
        ge=1,
        le=64,
        description="GPUs the host should have; the audit reports a mismatch.",
        json_schema_extra=allowed("1..64, or unset to take what is found"),
    )

    expected_gpu_model: Annotated[str | None, AfterValidator(_known_gpu_model)] = Field(
        None,
        description=(
            "The GPU model the host has, as nvidia-smi names it: validation plans the "
            "memory fit, tensor parallelism and backends for it; the deploy refuses a host "
            "whose GPUs are another model and the audit reports one. Unset: validation "
            "assumes the largest GPU (data/gpus.toml) of the profile's architectures, and "
            "settings that fit it but not the GPUs the host has pass until the service step."
        ),
        json_schema_extra=allowed(f"one of: {one_of(gpu_names())}; or unset"),
    )

    @model_validator(mode="after")
    def _nccl_p2p_values(self) -> Self:
        # A misspelt level makes NCCL warn and fall back to its default silently.
        problem = check_p2p_env(self.sglang_env)
        if problem:
            raise field_error("sglang_env", problem)
        return self
