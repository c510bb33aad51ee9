"""The audit's reading of the NVSwitch fabric, Fabric Manager and cuInit (judged by
pyinfra_sglang/audit/fabric.py): the fields of AuditFacts they fill."""

from __future__ import annotations

from checks.facts import CudaInit, NvidiaFabric, SystemdUnitState
from pyinfra_sglang import data
from pyinfra_sglang.driver.fabric import installed_fabric_manager


def read_fabric(host, installed: dict[str, list[str]], venv: str) -> dict:
    """``installed``: the host's DebPackages, read already."""
    package = installed_fabric_manager(installed)
    return {
        "fabric": host.get_fact(NvidiaFabric),
        "fabric_manager_service": host.get_fact(
            SystemdUnitState, unit=data.nvidia().fabric_manager.service
        ),
        "fabric_manager_package": list(package) if package else None,
        "cuda_init": host.get_fact(CudaInit, venv=venv),
    }
