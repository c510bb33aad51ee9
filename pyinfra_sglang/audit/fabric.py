"""NVSwitch fabric and CUDA initialization: Fabric Manager's service and version against the
driver's, the GPUs' fabric state, and whether cuInit succeeds (pyinfra_sglang/driver/fabric.py
reads and decides; this judges)."""

from __future__ import annotations

from pyinfra_sglang import data
from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.driver.fabric import (
    CUDA_RESULTS,
    fabric_attached,
    fabric_manager_problems,
    fabric_need,
    fabric_ready,
    subnet_manager_for,
)
from pyinfra_sglang.parsers.system import detected_vm


def _not_ready(gpus: list[dict]) -> list[str]:
    return [
        f"GPU {g['index']}: State {g.get('state') or '?'}, Status {g.get('status') or '?'}"
        for g in gpus
        if not fabric_ready(g)  # type: ignore[arg-type]
    ]


def _missing_modules(fabric: dict, archs: list[str | None]) -> list[str] | None:
    """The kernel modules NVLink 5's subnet manager needs that are not loaded (None: no
    NVLink 5 here, or a record that did not read them)."""
    entry = subnet_manager_for(archs)
    if entry is None or "modules" not in fabric:
        return None
    return [m for m in entry.kernel_modules if m not in fabric["modules"]]


def findings_for_fabric(
    fabric: dict | None,
    virtualization: dict | None,
    service: dict[str, str] | None,
    package: list | tuple | None,
    driver_version: str | None,
    archs: list[str | None] | None = None,
) -> list[Finding]:
    """``fabric``: the NvidiaFabric fact (None: not read, a record made before); ``service``:
    Fabric Manager's unit state; ``package``: (name, Debian version) of the installed FM
    package; ``driver_version``: the loaded driver's release; ``archs``: the GPUs' ("sm_100":
    NVLink 5 needs its subnet manager's kernel modules)."""
    if fabric is None:
        return []
    fm = data.nvidia().fabric_manager
    need = fabric_need(fabric, virtualization)  # type: ignore[arg-type]
    gpus = fabric["gpus"]
    evidence = {
        "where": need.where,
        "nvswitches": fabric["nvswitches"],
        "fabric": [{k: g.get(k) for k in ("index", "state", "status")} for g in gpus],
    }
    if need.where == "none":
        return [
            Finding(
                "ok",
                "fabric-manager",
                f"no NVSwitch fabric: {need.reason}; Fabric Manager is not needed.",
                evidence=evidence,
            )
        ]
    not_ready = _not_ready(gpus)
    if need.where == "hypervisor":
        vm = detected_vm(virtualization)
        if not not_ready:
            return [
                Finding(
                    "ok",
                    "fabric-manager",
                    f"the NVLink fabric is registered ({fm.ready_state}/{fm.ready_status} on "
                    f"every GPU), managed by the hypervisor of this VM ({vm}).",
                    evidence=evidence,
                )
            ]
        return [
            Finding(
                "fail",
                "fabric-manager",
                f"the GPUs' NVLink fabric is not registered ({'; '.join(not_ready)}) and this "
                f"VM ({vm}) sees no NVSwitch: Fabric Manager runs on the hypervisor. CUDA will "
                "not initialize (error 802) until it does: ask the VM's provider to check "
                "Fabric Manager on the hypervisor.",
                evidence=evidence,
            )
        ]
    package = tuple(package) if package else None
    problems = fabric_manager_problems(service or {}, package, driver_version)  # type: ignore[arg-type]
    evidence.update(
        {
            "service": (service or {}).get("ActiveState"),
            "package": list(package) if package else None,
            "driver": driver_version,
        }
    )
    if not_ready:
        problems.append(f"the fabric is not registered ({'; '.join(not_ready)})")
    missing = _missing_modules(fabric, archs or [])
    container = (virtualization or {}).get("container") not in (None, "none", "unknown")
    if missing and not container:
        problems.append(
            f"NVLink 5's subnet manager needs the kernel modules {', '.join(missing)}, not "
            "loaded (NVIDIA's driver container waits for mlx5_core and ib_umad before it "
            "starts Fabric Manager; mlx5_ib makes the ConnectX ports InfiniBand devices)"
        )
        evidence["modules_missing"] = missing
    if problems:
        return [
            Finding(
                "fail",
                "fabric-manager",
                f"this host needs NVIDIA Fabric Manager ({need.reason}), but "
                f"{'; '.join(problems)}. CUDA will not initialize (error 802) until Fabric "
                f"Manager runs at the driver's release: apply deploy/site.py (it installs it "
                f"at the driver's release and starts {fm.service}), or check "
                f"`journalctl -u {fm.service}`.",
                evidence=evidence,
            )
        ]
    version = f" {package[1]}" if package else ""
    return [
        Finding(
            "ok",
            "fabric-manager",
            f"Fabric Manager{version} runs at the driver's release ({driver_version}); the "
            f"fabric is registered on every GPU ({need.reason}).",
            evidence=evidence,
        )
    ]


def findings_for_fabric_state(gpus: list) -> list[Finding]:
    """``pyinfra-sglang analyze --smi-q``: the GPUs' fabric state alone (a pasted `nvidia-smi
    -q` says nothing of Fabric Manager's service or where the host runs)."""
    if not gpus:
        return []
    fm = data.nvidia().fabric_manager
    evidence = {"fabric": [{k: g.get(k) for k in ("index", "state", "status")} for g in gpus]}
    if not fabric_attached(gpus):
        unread = [g for g in gpus if g.get("state") not in fm.unattached_states]
        if unread:
            shown = ", ".join(f"GPU {g.get('index')}: {g.get('state')!r}" for g in unread)
            message = (
                f"the Fabric State of {len(unread)} of {len(gpus)} GPU(s) could not be read "
                f"({shown}; known: {', '.join(fm.attached_states + fm.unattached_states)}): "
                "whether Fabric Manager is needed is not known. Give the whole `nvidia-smi -q`."
            )
            return [Finding("warn", "fabric-manager", message, evidence=evidence)]
        states = ", ".join(sorted({str(g.get("state")) for g in gpus}))
        message = f"no NVSwitch fabric (Fabric State {states}): Fabric Manager is not needed."
        return [Finding("ok", "fabric-manager", message, evidence=evidence)]
    not_ready = _not_ready(gpus)
    if not not_ready:
        message = (
            f"the NVLink fabric is registered ({fm.ready_state}/{fm.ready_status} on every GPU)."
        )
        return [Finding("ok", "fabric-manager", message, evidence=evidence)]
    return [
        Finding(
            "fail",
            "fabric-manager",
            f"the GPUs' NVLink fabric is not registered ({'; '.join(not_ready)}): CUDA will not "
            "initialize (error 802) until Fabric Manager runs at the driver's release (on this "
            "host, or on the hypervisor of a VM that sees no NVSwitch).",
            evidence=evidence,
        )
    ]


def findings_for_cuda_init(probe: dict | None) -> list[Finding]:
    """The CudaInit fact: cuInit(0)'s CUresult, or why it was not probed."""
    if probe is None:
        return []
    if not probe.get("probed"):
        reason = probe.get("reason") or "unknown"
        return [Finding("ok", "cuda-init", f"not probed: {reason}.", evidence=dict(probe))]
    result = probe.get("result")
    name = CUDA_RESULTS.get(result, "an error") if isinstance(result, int) else "no result"
    if result == 0:
        return [Finding("ok", "cuda-init", "CUDA initializes (cuInit: CUDA_SUCCESS).")]
    hint = (
        " The GPUs wait for their NVLink fabric: Fabric Manager is not running at the "
        "driver's release (see the fabric-manager finding)."
        if result == 802
        else ""
    )
    return [
        Finding(
            "fail",
            "cuda-init",
            f"CUDA does not initialize: cuInit returned {result} ({name}).{hint}",
            evidence=dict(probe),
        )
    ]
