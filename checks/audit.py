"""The check-only audit: read every fact into a record, judge it (pyinfra_sglang/audit/judge.py),
report. Never changes a host.

``audit_host`` is a pyinfra operation that does its reading when the run executes, so
pyinfra audits all hosts in parallel; it yields no command: a failing finding is logged and
makes the run exit non-zero (checks/failures.py ``fail_run``). A host pyinfra cannot connect
to gets a report too, saying so (``report_unreachable``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import shlex
from datetime import date
from pathlib import Path
from secrets import token_bytes

from pyinfra import host, logger, state
from pyinfra.api import operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File
from pyinfra.facts.server import Which

from checks.fabric_reading import read_fabric
from checks.facts import (
    AptPolicy,
    DcgmDiag,
    DkmsState,
    FileDigests,
    FirstLine,
    GroupNetwork,
    IommuState,
    JsonRecord,
    KernelXids,
    NvccRelease,
    NvidiaGpus,
    NvidiaLoadedModule,
    NvidiaMemoryHealth,
    NvidiaNicPaths,
    NvidiaNvlinkErrors,
    NvidiaP2P,
    NvidiaPciDevices,
    NvidiaSmiPackage,
    NvidiaTopology,
    PcieAcs,
    PythonPackages,
    SecureBootState,
    SnapshotDamage,
    SnapshotFiles,
    StateFile,
    SystemdUnitState,
    Virtualization,
)
from checks.failures import fail_run
from checks.flash_attn_decision import flash_attn_decision
from checks.gpu_load import run_under_load
from checks.host_context import group_interface, host_position, ship_and_run
from checks.peer_path import read_peer_path
from checks.prometheus import PrometheusTargets
from checks.run_summary import run_inventory
from pyinfra_sglang import data
from pyinfra_sglang.audit.judge import audit_report, judge, serves_here, unit_installed
from pyinfra_sglang.audit.load import after_decode, after_load, needs_load
from pyinfra_sglang.audit.record import AuditExpectations, AuditFacts, GpuLoadReading, UnitFiles
from pyinfra_sglang.audit.report import (
    findings_for_inventory,
    format_table,
    safe_name,
    unreachable_report,
    write_report,
)
from pyinfra_sglang.driver.nvidia import (
    REBOOT_REQUIRED,
    all_kernel_module_packages,
    upstream_version,
)
from pyinfra_sglang.gpu_links.pcie import peer_probe_timeout_s
from pyinfra_sglang.host_programs.decode_client import API_KEY_ENV
from pyinfra_sglang.inventory import HostConfig, host_config, host_profile
from pyinfra_sglang.model_files.model_snapshot import (
    COMMIT,
    DEFAULT_ENDPOINT,
    cache_folder_name,
    hub_cache_dir,
    hub_snapshot,
    is_local_model,
    model_revision,
    ref_file,
    snapshot_folder,
)
from pyinfra_sglang.python_env.flash_attn_build_plan import build_log_paths, built_archs
from pyinfra_sglang.run_summary import prefixed
from pyinfra_sglang.serving.secret_files import read_secret
from pyinfra_sglang.serving.service_files import (
    UNIT_NAME,
    read_secrets,
    server_url,
    service_file_path,
    service_files,
)
from pyinfra_sglang.serving.watchdog import state_path as watchdog_state_path
from pyinfra_sglang.serving.watchdog import timer_unit as watchdog_timer_unit

EXPECTED_ANSWER = "Paris"  # the decode check's default question is the capital of France
COPY_LOAD_SECONDS = 2
# The load the decode check runs under is cut at LOAD_TIMEOUT_S; the check's own --timeout is
# a deadline for all its requests together, set inside that with a margin so it reports
# "timeout" itself rather than being killed.
LOAD_TIMEOUT_S = 180
DECODE_TIMEOUT_S = LOAD_TIMEOUT_S - 20


def decode_load(config: HostConfig) -> str:
    args = ["--url", server_url(config), "--expect", EXPECTED_ANSWER, "--json"]
    args += ["--timeout", str(DECODE_TIMEOUT_S)]
    if not config.sglang_api_key_file:
        return ship_and_run("decode_client.py", "python3", args)
    # The key is read on the host from the service's own 0600 config into the environment of
    # the check alone: never sent from here, never on a command line.
    config_file = shlex.quote(service_file_path("config"))
    setup = (
        f'{API_KEY_ENV}="$(python3 $probe/api_key.py {config_file})" || exit 2; '
        f"export {API_KEY_ENV}; "
    )
    return ship_and_run("decode_client.py", "python3", args, ("api_key.py",), setup)


def copy_load(config: HostConfig) -> str:
    python = f"{config.venv_path}/bin/python"
    return ship_and_run("copy_load.py", python, [str(COPY_LOAD_SECONDS)])


def link_probe(config: HostConfig) -> str:
    # The peer tests' deadline: a hang becomes p2p-probe-hang, not a killed probe.
    args = ["--peer-timeout", str(peer_probe_timeout_s())]
    return ship_and_run("link_probe.py", f"{config.venv_path}/bin/python", args)


def _sample_under(command: str) -> dict:
    return run_under_load(host, command, LOAD_TIMEOUT_S)


def read_gpu_load(config: HostConfig, serving: bool, torch: bool) -> GpuLoadReading:
    """Load the GPUs while sampling their links: the decode prompt when the service serves
    here, the link probe when asked for, else (or when the prompt failed) a copy load with the
    venv's torch; nothing without any of them (pyinfra_sglang/audit/load.py judges each run)."""
    reading = after_decode(_sample_under(decode_load(config))) if serving else GpuLoadReading()
    load_kind = needs_load(reading, config.audit_link_probe, torch)
    if load_kind is None:
        return reading
    load = link_probe(config) if load_kind == "probe" else copy_load(config)
    return after_load(reading, load_kind, _sample_under(load))


def read_unit_files(config: HostConfig, gpus: list[dict]) -> UnitFiles:
    """The service files' digests as the inventory renders them here, and on the host."""
    try:
        secrets = read_secrets(config, host.name)
        topology = host.get_fact(NvidiaTopology) if len(gpus) > 1 else None
        node = host_position(config, host)
        peer = read_peer_path(host, len(gpus))
        interface = group_interface(config, host)
        files = service_files(config, host.name, gpus, node, secrets, topology, peer, interface)
    except (PyinfraError, ValueError, OSError) as error:
        return UnitFiles(problem=str(error))
    expected = {f.path: hashlib.sha256(f.content.encode()).hexdigest() for f in files.files}
    current = host.get_fact(FileDigests, paths=sorted(expected))
    # The env and config files hold the HF token and the API key: a plain sha256 of them in
    # the report would let a word list recover a weak key. Keyed with a key that exists only
    # for this run, equal files still compare equal and nothing can be guessed from the value.
    key = token_bytes(32)
    return UnitFiles(
        expected={path: blind(key, digest) for path, digest in expected.items()},
        current={path: blind(key, digest) for path, digest in current.items()},
    )


def blind(key: bytes, digest: str | None) -> str | None:
    """``digest`` keyed with ``key`` (HMAC-SHA256); None stays None (a missing file)."""
    return None if digest is None else hmac.new(key, digest.encode(), "sha256").hexdigest()


def read_model(config: HostConfig) -> dict:
    """The model's snapshot on this host: which commit the inventory's revision stands for
    there (a commit as given, else the cache's refs/), its files, what a cut-off download
    left; for a branch or tag, the commit it stands for on the Hub now (None when the Hub
    cannot be asked: the audit changes nothing and needs no network)."""
    profile = host_profile(config)
    model = profile.model
    if is_local_model(model):
        present = host.get_fact(File, path=f"{model.rstrip('/')}/config.json")
        return {"name": model, "local": True, "files": 1 if present else 0}
    cache = hub_cache_dir(config.sglang_model_cache_dir)
    revision = model_revision(config.sglang_model_revision, profile.revision)
    commit = (
        revision
        if COMMIT.match(revision)
        else host.get_fact(FirstLine, path=ref_file(cache, model, revision))
    )
    files = (
        host.get_fact(SnapshotFiles, folder=snapshot_folder(cache, model, commit)) if commit else {}
    )
    damage = host.get_fact(SnapshotDamage, model_folder=f"{cache}/{cache_folder_name(model)}")
    hub_commit = None
    if commit and files and not COMMIT.match(revision):
        try:
            token = read_secret(config.hf_token_file, "hf_token_file", host.name)
            endpoint = str(config.hf_endpoint or DEFAULT_ENDPOINT).rstrip("/")
            timeout = float(data.model().audit_api_timeout_s)
            hub_commit = hub_snapshot(endpoint, model, revision, token, timeout).commit
        except PyinfraError:
            hub_commit = None
    return {
        "name": model,
        "local": False,
        "revision": revision,
        "commit": commit,
        "files": len(files),
        "broken": damage.get("broken", 0),
        "incomplete": damage.get("incomplete", 0),
        "hub_commit": hub_commit,
    }


def read_flash_attn(packages: dict[str, str]) -> dict | None:
    """The venv's flash-attn and the CUDA architectures its build record names."""
    installed = packages.get("flash-attn")
    if not installed:
        return None
    record = host.get_fact(JsonRecord, path=build_log_paths(installed)[1])
    archs = built_archs(record)
    return {"installed": installed, "built_archs": list(archs) if archs else None}


def read_watchdog() -> dict:
    """The watchdog's timer and its state file (root's: the audit runs as root)."""
    timer = watchdog_timer_unit()
    state = host.get_fact(StateFile, path=watchdog_state_path())
    return {
        "timer_unit": timer,
        "timer": host.get_fact(SystemdUnitState, unit=timer),
        "state": state["record"],
        # There, yet no JSON object in it: unreadable, which is no "not written yet".
        "state_present": state["present"],
    }


def read_monitoring(url: str | None) -> dict | None:
    """The monitoring server's Prometheus targets, asked on the host; None elsewhere."""
    if url is None:
        return None
    return {"url": url, "targets": host.get_fact(PrometheusTargets, url=url)}


def read_group_network(config: HostConfig) -> dict | None:
    """The group network of a multi-node member across machines: read on the interface the
    inventory names, else the one its route to the others leaves by; None elsewhere."""
    if not config.sglang_multinode_group:
        return None
    interface = config.sglang_multinode_interface or group_interface(config, host)
    reading = host.get_fact(GroupNetwork, interface=interface) if interface else None
    if reading and reading["ports"]:
        # Which NIC each GPU reaches directly: read only where there is an RDMA port.
        reading = {**reading, "nic_paths": host.get_fact(NvidiaNicPaths)}
    return reading


def read_facts(config: HostConfig, expected: AuditExpectations) -> AuditFacts:
    """Read the current pyinfra host: every fact the judge needs, loads included."""
    # The nvidia-smi facts require it (their requires_command); read while the run executes,
    # a missing program is a finding here, not the misordered deploy pyinfra warns about.
    smi = bool(host.get_fact(Which, command="nvidia-smi"))

    def smi_fact(fact, **arguments):
        return host.get_fact(fact, **arguments) if smi else fact.default()

    gpus = smi_fact(NvidiaGpus)
    virtualization = host.get_fact(Virtualization)
    loaded = host.get_fact(NvidiaLoadedModule)
    if loaded is None and gpus and virtualization["container"] not in (None, "unknown"):
        # A container may not see /proc/driver/nvidia; nvidia-smi's driver version is the
        # outer host's kernel module all the same (the flavor stays unknown).
        loaded = {"version": gpus[0]["driver_version"], "flavor": None}
    # Whichever family's module package the host has (at most one is installed).
    installed = host.get_fact(DebPackages)
    module_package = next(
        (name for name in all_kernel_module_packages(config) if installed.get(name)), None
    )
    module_versions = installed.get(module_package, []) if module_package else []
    candidate = None
    if module_package:
        policy = host.get_fact(AptPolicy, packages=[module_package])
        candidate = policy.get(module_package, {}).get("candidate")
    service = host.get_fact(SystemdUnitState, unit=UNIT_NAME)
    packages = host.get_fact(PythonPackages, venv=config.venv_path)
    router = None
    if expected.router_unit:
        router = host.get_fact(SystemdUnitState, unit=expected.router_unit)
    facts = AuditFacts(
        gpus=gpus,
        loaded_module=loaded,
        installed_module=upstream_version(max(module_versions)) if module_versions else None,
        reboot_required=bool(host.get_fact(File, path=REBOOT_REQUIRED)),
        nvcc=host.get_fact(NvccRelease, path=expected.nvcc_path),
        virtualization=virtualization,
        topology=smi_fact(NvidiaTopology),
        p2p=smi_fact(NvidiaP2P, mode="r"),
        iommu=host.get_fact(IommuState),
        persistenced=host.get_fact(SystemdUnitState, unit="nvidia-persistenced.service"),
        service=service,
        router_service=router,
        sglang_version=packages.get("sglang"),
        unit_files=None,
        load=GpuLoadReading(),
        dkms=host.get_fact(DkmsState),
        secure_boot=host.get_fact(SecureBootState),
        nvidia_smi_package=smi_fact(NvidiaSmiPackage),
        module_candidate=upstream_version(candidate) if candidate else None,
        model=read_model(config),
        flash_attn=read_flash_attn(packages),
        nvidia_pci_devices=host.get_fact(NvidiaPciDevices),
        pcie_acs=host.get_fact(PcieAcs) if len(gpus) > 1 else None,
        **read_fabric(host, installed, config.venv_path),
        audited_on=date.today().isoformat(),
        watchdog=read_watchdog() if expected.watchdog else None,
        monitoring=read_monitoring(expected.monitoring_url),
        group_network=read_group_network(config),
    )
    if not gpus:
        return facts
    unit_files = read_unit_files(config, gpus) if unit_installed(facts) else None
    # GPU health (audit/health.py): read before the load, so its own Xids would show.
    health = {
        "kernel_xids": host.get_fact(KernelXids),
        "memory_health": smi_fact(NvidiaMemoryHealth),
        "nvlink_errors": smi_fact(NvidiaNvlinkErrors),
        "dcgm_diag": {
            **host.get_fact(DcgmDiag, level=config.audit_dcgm_level),
            "level": config.audit_dcgm_level,
        },
    }
    load = read_gpu_load(config, serves_here(expected, facts), torch="torch" in packages)
    return dataclasses.replace(facts, unit_files=unit_files, load=load, **health)


def report_file_name(host_name: str) -> str:
    return safe_name(host_name) + ".json"


@operation()
def audit_host(config: HostConfig, report_dir: str):
    """Audit this host; write ``report_dir/<host>.json``; fail the run when any finding
    fails."""
    if not state.is_executing:
        host.noop("the audit reads the host when the run executes and changes nothing")
        return
    rank = host_position(config, host).rank
    expected = AuditExpectations.from_config(config, UNIT_NAME, rank, flash_attn_decision(config))
    facts = read_facts(config, expected)
    # Remediations name the inventory this run was started with, ready to paste.
    findings = findings_for_inventory(judge(expected, facts), run_inventory())
    document = audit_report(host.name, expected, facts, findings)
    path = write_report(Path(report_dir) / report_file_name(host.name), document)
    table = prefixed(host.name, f"{format_table(host.name, findings)}\n  report: {path}")
    logger.info(f"{host.print_prefix}{table}")
    failures = sorted({f.code for f in findings if f.level == "fail"})
    if not failures:
        host.noop(f"audit passed ({document['summary']})")
        return
    fail_run(state, host, "audit", [", ".join(failures)])
    # An operation must be a generator to pyinfra: this one yields no command.
    yield from ()


def report_unreachable(unreachable_host, error: str) -> None:
    """The report of a host pyinfra could not connect to: status "unreachable", the error."""
    config = host_config(unreachable_host)
    write_report(
        Path(config.audit_report_dir) / report_file_name(unreachable_host.name),
        unreachable_report(unreachable_host.name, error),
    )
