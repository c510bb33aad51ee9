"""The check-only audit: read every fact, judge it, report. Never changes a host.

``audit_host`` is a pyinfra operation that does its reading when the run executes, so
pyinfra audits all hosts in parallel; it yields no command when nothing fails, and a
callback that reports the failures (failing the host, so the run exits non-zero) otherwise.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File

from checks.bandwidth import findings_for_bandwidth
from checks.drift import (
    findings_for_cuda,
    findings_for_driver,
    findings_for_gpu_count,
    findings_for_iommu,
    findings_for_persistence,
    findings_for_sglang_version,
)
from checks.facts import (
    FileDigests,
    GpuQueryUnderLoad,
    IommuState,
    NvccRelease,
    NvidiaGpus,
    NvidiaLoadedModule,
    NvidiaP2P,
    NvidiaTopology,
    PythonPackages,
    SystemdUnitState,
    Virtualization,
    detected_vm,
    topology_has_nvlink,
)
from checks.findings import Finding
from checks.links import findings_for_links, pcie_links
from checks.report import (
    fail_host,
    format_table,
    report,
    safe_name,
    summary,
    write_report,
)
from checks.service import (
    findings_for_decode,
    findings_for_service,
    findings_for_unit_drift,
)
from checks.topology import findings_for_p2p, findings_for_topology, p2p_all_ok
from pyinfra_sglang.inventory import HostConfig
from roles.cuda_toolkit import cuda_paths
from roles.nvidia_driver import REBOOT_REQUIRED, kernel_module_package, upstream_version
from roles.sglang_service import (
    ROUTER_UNIT_PATH,
    UNIT_NAME,
    multinode_position,
    server_url,
    service_file_path,
    service_files,
)

CHECKS_DIR = Path(__file__).resolve().parent
EXPECTED_ANSWER = "Paris"  # the decode check's default question is the capital of France
COPY_LOAD_SECONDS = 2
# decode.py makes up to four requests (health, models, streamed, plain); the load they run
# under is cut at LOAD_TIMEOUT_S, so each gets a quarter of it, minus a margin.
LOAD_TIMEOUT_S = 180
DECODE_REQUEST_TIMEOUT_S = 40


def _ship_and_run(program: Path, interpreter: str, args: list[str]) -> str:
    """Run a local Python file on the host: written to a temporary folder first (a probe that
    spawns processes needs a real file), removed after."""
    quoted = " ".join(shlex.quote(a) for a in args)
    return (
        f"probe=$(mktemp -d) && cat > $probe/{program.name} <<'PYINFRA_SGLANG_EOF'\n"
        f"{program.read_text()}\nPYINFRA_SGLANG_EOF\n"
        f"{interpreter} $probe/{program.name} {quoted}; rc=$?; rm -rf $probe; exit $rc"
    )


def decode_load(config: HostConfig) -> str:
    args = ["--url", server_url(config), "--expect", EXPECTED_ANSWER, "--json",
            "--timeout", str(DECODE_REQUEST_TIMEOUT_S)]  # fmt: skip
    if config.sglang_api_key_file:
        # The key is read on the host from the service's own 0600 config, never sent here.
        args += ["--api-key-file", service_file_path("config")]
    return _ship_and_run(CHECKS_DIR / "decode.py", "python3", args)


def copy_load(config: HostConfig) -> str:
    return _ship_and_run(CHECKS_DIR / "probes" / "copy_load.py", f"{config.venv_path}/bin/python", [str(COPY_LOAD_SECONDS)])


def link_probe(config: HostConfig) -> str:
    return _ship_and_run(CHECKS_DIR / "probes" / "link_probe.py", f"{config.venv_path}/bin/python", [])


def _json_output(lines: list[str]) -> dict | None:
    """The last JSON object a probe printed (it may span several lines; warnings may come
    before or after it)."""
    decoder = json.JSONDecoder()
    text = "\n".join(lines)
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("{")]
    for index in reversed(starts):
        offset = len("\n".join(lines[:index])) + (1 if index else 0)
        try:
            value, _ = decoder.raw_decode(text, offset + len(lines[index]) - len(lines[index].lstrip()))
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _expected_digests(config: HostConfig, gpus: list[dict]) -> tuple[dict[str, str], str | None]:
    try:
        files = service_files(config, gpus).files
    except (PyinfraError, ValueError, OSError) as error:
        return {}, str(error)
    return {f.path: hashlib.sha256(f.content.encode()).hexdigest() for f in files}, None


def _load_gpus(config: HostConfig, serving: bool, torch: bool) -> dict:
    """Load the GPUs while sampling their links: the decode prompt when the service serves
    here, the link probe when asked for, else (or when the prompt failed) a copy load with the
    venv's torch; nothing without any of them. ``{"decode", "probe", "probe_failure",
    "samples", "load"}``, ``load`` naming what the samples were read under."""
    found = {"decode": None, "probe": None, "probe_failure": None, "samples": [], "load": "none"}
    if serving:
        sampled = host.get_fact(GpuQueryUnderLoad, load=decode_load(config), timeout_s=LOAD_TIMEOUT_S)
        found["decode"] = _json_output(sampled["load_output"]) or {
            "ok": False, "reason": "protocol-error",
            "message": f"the decode check printed no result (exit {sampled['load_rc']}): "
            + " ".join(sampled["load_output"][-3:]),
        }  # fmt: skip
        if found["decode"].get("ok"):  # a failed prompt loaded nothing
            found["samples"], found["load"] = sampled["samples"], "decode"
    if torch and (config.audit_link_probe or found["load"] == "none"):
        kind, command = ("probe", link_probe(config)) if config.audit_link_probe else ("copy", copy_load(config))
        sampled = host.get_fact(GpuQueryUnderLoad, load=command, timeout_s=LOAD_TIMEOUT_S)
        if sampled["load_rc"] == 0:
            found["samples"], found["load"] = found["samples"] + sampled["samples"], kind
            found["probe"] = _json_output(sampled["load_output"])
        elif kind == "probe":
            found["probe_failure"] = f"exit {sampled['load_rc']}: " + " ".join(sampled["load_output"][-3:])
    return found


def collect(config: HostConfig) -> tuple[dict, list[Finding]]:
    """Read the host (the current pyinfra host) and judge it: (facts for the report, findings)."""
    gpus = host.get_fact(NvidiaGpus)
    loaded = host.get_fact(NvidiaLoadedModule)
    module_versions = host.get_fact(DebPackages).get(kernel_module_package(config), [])
    installed = upstream_version(max(module_versions)) if module_versions else None
    nvcc_path = cuda_paths(config.cuda_version)["nvcc"]
    nvcc = host.get_fact(NvccRelease, path=nvcc_path)
    virtualization = host.get_fact(Virtualization)
    topology = host.get_fact(NvidiaTopology)
    p2p = host.get_fact(NvidiaP2P, mode="r")
    iommu = host.get_fact(IommuState)
    persistenced = host.get_fact(SystemdUnitState, unit="nvidia-persistenced.service")
    service = host.get_fact(SystemdUnitState, unit=UNIT_NAME)
    packages = host.get_fact(PythonPackages, venv=config.venv_path)
    _, rank, _ = multinode_position(config)
    vm = detected_vm(virtualization)
    if loaded is None and gpus and virtualization["container"] not in (None, "unknown"):
        # A container may not see /proc/driver/nvidia; nvidia-smi's driver version is the
        # outer host's kernel module all the same (the flavor stays unknown).
        loaded = {"version": gpus[0]["driver_version"], "flavor": None}

    findings: list[Finding] = []
    findings += findings_for_driver(
        config.nvidia_driver_branch, config.nvidia_kernel_modules, loaded, installed,
        gpus[0]["driver_version"] if gpus else None, len(gpus),
    )  # fmt: skip
    if host.get_fact(File, path=REBOOT_REQUIRED) and not any(f.code == "driver-reboot-required" for f in findings):
        findings.append(Finding(
            "warn", "driver-reboot-required",
            f"{REBOOT_REQUIRED} exists: a package update waits for a reboot.",
        ))  # fmt: skip
    findings += findings_for_cuda(config.cuda_version, nvcc, nvcc_path)
    findings += findings_for_gpu_count(config.expected_gpu_count, len(gpus))
    findings += findings_for_persistence(gpus, persistenced)
    findings += findings_for_topology(topology, len(gpus))
    findings += findings_for_p2p(p2p, len(gpus), vm)
    findings += findings_for_iommu(iommu, len(gpus), vm)
    findings += findings_for_sglang_version(config.sglang_version, packages.get("sglang"), config.venv_path)
    findings += findings_for_service(UNIT_NAME, service)
    if config.sglang_router_worker_urls:
        router = Path(ROUTER_UNIT_PATH).name
        findings += findings_for_service(router, host.get_fact(SystemdUnitState, unit=router))

    installed_unit = service.get("LoadState") not in (None, "not-found")
    if installed_unit and gpus:
        expected, problem = _expected_digests(config, gpus)
        if problem:
            findings.append(Finding("warn", "unit-drift", f"cannot render the expected service files: {problem}"))
        else:
            findings += findings_for_unit_drift(expected, host.get_fact(FileDigests, paths=sorted(expected)))

    loaded = {"decode": None, "probe": None, "samples": [], "load": "none"}
    if gpus:
        serving = service.get("ActiveState") == "active" and rank == 0
        loaded = _load_gpus(config, serving, torch="torch" in packages)
        findings += findings_for_links(gpus, loaded["samples"], loaded["load"])
        if loaded["load"] == "probe" and loaded["probe"]:
            findings += findings_for_bandwidth(loaded["probe"], pcie_links(gpus), topology)
        if loaded.get("probe_failure"):
            findings.append(Finding(
                "warn", "link-probe-failed",
                f"the link bandwidth probe failed ({loaded['probe_failure']}); links were not "
                "measured. Free GPU memory (stop the service) and audit again.",
            ))  # fmt: skip
        if rank == 0:
            findings += findings_for_decode(
                loaded["decode"], skipped=None if serving or not installed_unit else f"{UNIT_NAME} is not running"
            )

    facts = {
        "gpus": pcie_links(gpus),
        "topology": {"matrix": topology, "nvlink": topology_has_nvlink(topology)},
        "p2p": {"matrix": p2p, "ok": p2p_all_ok(p2p)},
        "driver": {"loaded": loaded, "installed": installed, "userspace": gpus[0]["driver_version"] if gpus else None},
        "cuda": nvcc,
        "virtualization": virtualization,
        "iommu": iommu,
        "service": service,
        "sglang_version": packages.get("sglang"),
        "load": {"kind": loaded["load"], "samples": len(loaded["samples"]), "result": loaded["probe"]},
        "decode": loaded["decode"],
    }
    return facts, findings


def report_file_name(host_name: str) -> str:
    return safe_name(host_name) + ".json"


@operation()
def audit_host(config: HostConfig, report_dir: str):
    """Audit this host; write ``report_dir/<host>.json``; fail when any finding fails."""
    if not state.is_executing:
        host.noop("the audit reads the host when the run executes and changes nothing")
        return
    facts, findings = collect(config)
    path = write_report(Path(report_dir) / report_file_name(host.name), report(host.name, findings, facts))
    logger.info(f"{host.print_prefix}{format_table(host.name, findings)}\n  report: {path}")
    failures = [f for f in findings if f.level == "fail"]
    if not failures:
        host.noop(f"audit passed ({summary(findings)})")
        return
    yield fail_host("audit", [", ".join(sorted({f.code for f in failures}))])
