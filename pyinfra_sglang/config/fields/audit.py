"""The audit and DCGM (deploy/audit.py, roles/dcgm.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, StrictBool

from pyinfra_sglang import data
from pyinfra_sglang.config.types import (
    FieldGroup,
    allowed,
    no_bool,
)

DcgmLevel = Annotated[
    Literal[data.dcgm().diag.levels],  # type: ignore[valid-type]
    BeforeValidator(no_bool),
]


class AuditFields(FieldGroup):
    """The audit and DCGM."""

    audit_report_dir: Annotated[str, Field(min_length=1)] = Field(
        "results/audit",
        description="Folder on the controller where deploy/audit.py writes `<host>.json`.",
        json_schema_extra=allowed("a path, relative to where pyinfra runs or absolute"),
    )

    audit_link_probe: StrictBool = Field(
        False,
        description=(
            "Should deploy/audit.py measure link bandwidth (host<->GPU, GPU<->GPU, "
            "NCCL all-reduce) with the venv's torch? Takes GPU memory and time while it runs."
        ),
        json_schema_extra=allowed("true, false"),
    )

    nvidia_dcgm_install: StrictBool = Field(
        False,
        description=(
            "Install NVIDIA DCGM from NVIDIA's repository (roles/dcgm.py): DCGM 4's package "
            "for cuda_version's major (data/dcgm.toml) and its `nvidia-dcgm` service, enabled "
            "and running, so the audit can run `dcgmi diag`. With "
            '`nvidia_driver_source = "host"` it installs nothing.'
        ),
        json_schema_extra=allowed("true, false"),
    )

    audit_dcgm_level: DcgmLevel = Field(
        data.dcgm().diag.default_level,
        description=(
            "Run level of `dcgmi diag -r` in deploy/audit.py where DCGM's dcgmi is on PATH "
            "(finding `dcgm-diag`): 1 takes seconds, 2 minutes, 3 about half an hour and "
            "needs the GPUs to itself. Where dcgmi is absent the audit notes it as not run."
        ),
        json_schema_extra=allowed(", ".join(str(n) for n in data.dcgm().diag.levels)),
    )
