"""What a host runs against what its inventory says it should: driver branch and module,
CUDA toolkit, GPU count, SGLang release, and the driver settings GPUs serve best with."""

from __future__ import annotations

from pyinfra_sglang.audit.findings import Finding
from pyinfra_sglang.audit.unread import unread_fields
from pyinfra_sglang.gpus import other_gpu_models
from pyinfra_sglang.parsers.system import iommu_passthrough
from pyinfra_sglang.python_env.flash_attn_build_plan import (
    archs_from_compute_caps,
    archs_text,
    rebuild_reason,
    uncovered_archs,
)

RUN_SITE = "Run `pyinfra INVENTORY deploy/site.py` to converge it"
HOST_SOURCE = 'nvidia_driver_source = "host"'


def findings_for_host_driver(
    loaded: dict | None, userspace: str | None, gpus_found: int
) -> list[Finding]:
    """The host's own driver (nvidia_driver_source = "host") is the expected one: judged
    for running at all and for its libraries matching the kernel module, never against a
    branch the inventory would install."""
    if loaded is None and gpus_found == 0:
        return [
            Finding(
                "fail",
                "driver-missing",
                f"No NVIDIA kernel module is loaded and nvidia-smi finds no GPU; {HOST_SOURCE} "
                "expects the driver the host's owner installed. Ask them, or let the deploy "
                'install one (nvidia_driver_source = "managed").',
            )
        ]
    if loaded is None:
        return [
            Finding(
                "fail",
                "driver-drift",
                f"nvidia-smi sees {gpus_found} GPUs but /proc/driver/nvidia/version is missing; "
                "check `lsmod | grep nvidia` and `dmesg`.",
            )
        ]
    evidence = {"loaded": loaded["version"], "flavor": loaded["flavor"], "source": "host"}
    if gpus_found == 0 or (userspace and userspace != loaded["version"]):
        return [
            Finding(
                "fail",
                "driver-drift",
                f"Kernel module {loaded['version']} is loaded but nvidia-smi "
                + (
                    "finds no GPU"
                    if gpus_found == 0
                    else f'reports {userspace} ("driver/library version mismatch")'
                )
                + ": the host's libraries moved without its kernel module. Reboot, or ask "
                "the host's owner.",
                evidence={**evidence, "userspace": userspace},
            )
        ]
    return [
        Finding(
            "ok",
            "driver",
            f"driver {loaded['version']} ({loaded['flavor'] or 'flavor unknown'}) loaded: the "
            f"host's own ({HOST_SOURCE}; the deploy leaves it as it is).",
            evidence=evidence,
        )
    ]


def findings_for_driver(
    branch: int,
    flavor: str,
    loaded: dict | None,
    installed: str | None,
    userspace: str | None,
    gpus_found: int,
    version: str | None = None,
) -> list[Finding]:
    """``loaded``: the kernel module (/proc/driver/nvidia/version; flavor None when only
    nvidia-smi told the version), ``installed``: the kernel module package's version,
    ``userspace``: the driver version nvidia-smi reports, ``version``: the exact release
    the inventory locks (nvidia_driver_version), if any. One function a finding code:
    driver-missing, driver-drift, driver-reboot-required, then driver when none of them."""
    if loaded is None and gpus_found == 0:
        return [_driver_missing(branch, flavor, installed)]
    if loaded is None:
        return [_no_module_file(gpus_found)]
    findings = _driver_drift(branch, flavor, loaded, userspace, gpus_found, version)
    findings += _driver_reboot_required(branch, loaded, installed)
    return findings or [_driver_ok(branch, loaded)]


def _driver_missing(branch: int, flavor: str, installed: str | None) -> Finding:
    return Finding(
        "fail",
        "driver-missing",
        f"No NVIDIA kernel module is loaded and nvidia-smi finds no GPU; expected the "
        f"{flavor} driver of branch {branch}. {RUN_SITE}, then reboot.",
        evidence={"installed": installed},
    )


def _no_module_file(gpus_found: int) -> Finding:
    return Finding(
        "fail",
        "driver-drift",
        f"nvidia-smi sees {gpus_found} GPUs but /proc/driver/nvidia/version is missing; "
        "check `lsmod | grep nvidia` and `dmesg`.",
    )


def _driver_drift(
    branch: int,
    flavor: str,
    loaded: dict,
    userspace: str | None,
    gpus_found: int,
    version: str | None,
) -> list[Finding]:
    """driver-drift: the loaded module against the GPUs found, the branch or release locked,
    the flavor and the userspace libraries."""
    found: list[Finding] = []
    evidence = {"loaded": loaded["version"], "flavor": loaded["flavor"], "branch": branch}
    if gpus_found == 0:
        found.append(
            Finding(
                "fail",
                "driver-drift",
                f"Kernel module {loaded['version']} is loaded but nvidia-smi finds no GPU: "
                "usually a driver/library version mismatch after the libraries were upgraded "
                "alone, or the wrong module flavor for the GPU. Run `nvidia-smi` to see its "
                "error; reboot.",
                evidence={"loaded": loaded["version"]},
            )
        )
    if not loaded["version"].startswith(f"{branch}."):
        found.append(
            Finding(
                "fail",
                "driver-drift",
                f"The kernel runs NVIDIA driver {loaded['version']}; the inventory wants "
                f"branch {branch}. {RUN_SITE} (it pins the branch), then reboot.",
                evidence=evidence,
            )
        )
    elif version and loaded["version"] != version:
        found.append(
            Finding(
                "fail",
                "driver-drift",
                f"The kernel runs NVIDIA driver {loaded['version']}; the inventory locks "
                f"{version} (nvidia_driver_version). {RUN_SITE} (it pins the release), "
                "then reboot.",
                evidence={**evidence, "version": version},
            )
        )
    if loaded["flavor"] and loaded["flavor"] != flavor:
        found.append(
            Finding(
                "fail",
                "driver-drift",
                f"The loaded kernel module is the {loaded['flavor']} flavor; "
                f"the inventory wants {flavor} (Blackwell GPUs need open). {RUN_SITE}.",
                evidence=evidence,
            )
        )
    if userspace and userspace != loaded["version"]:
        found.append(
            Finding(
                "fail",
                "driver-drift",
                f"Userspace driver {userspace} does not match the loaded kernel module "
                f'{loaded["version"]} ("driver/library version mismatch"): something '
                "upgraded the libraries alone. Reboot, and keep unattended-upgrades off "
                "nvidia packages.",
                evidence={**evidence, "userspace": userspace},
            )
        )
    return found


def _driver_reboot_required(branch: int, loaded: dict, installed: str | None) -> list[Finding]:
    if not installed or installed == loaded["version"]:
        return []
    evidence = {"loaded": loaded["version"], "flavor": loaded["flavor"], "branch": branch}
    return [
        Finding(
            "warn",
            "driver-reboot-required",
            f"Driver {installed} is installed but the kernel runs {loaded['version']}: "
            "reboot to load it (the deploy does so with allow_reboot: true).",
            evidence={**evidence, "installed": installed},
        )
    ]


def _driver_ok(branch: int, loaded: dict) -> Finding:
    return Finding(
        "ok",
        "driver",
        f"driver {loaded['version']} ({loaded['flavor'] or 'flavor unknown'}) loaded, "
        f"on branch {branch}.",
    )


def findings_for_cuda(
    release: str,
    nvcc: dict | None,
    nvcc_path: str,
    host_source: bool = False,
    flash_attn_build: bool = True,
) -> list[Finding]:
    """``host_source``: the toolkits are the host's own (nvidia_driver_source = "host"):
    a missing one fails only where flash-attn is built with it, and the deploy is never
    the way to it."""
    if host_source and (nvcc is None or nvcc["release"] != release):
        found = "none" if nvcc is None else f"CUDA {nvcc['release']} ({nvcc['version']})"
        return [
            Finding(
                "fail" if flash_attn_build else "warn",
                "cuda-drift",
                f"No CUDA Toolkit {release} at {nvcc_path} (found: {found}); {HOST_SOURCE} "
                "installs none. flash-attn is built with it"
                + ("" if flash_attn_build else " (where it is built; it is not built here)")
                + ": set cuda_version to a toolkit the host has, or ask its owner.",
                evidence=dict(nvcc or {}),
            )
        ]
    if nvcc is None:
        return [
            Finding(
                "fail",
                "cuda-drift",
                f"No nvcc at {nvcc_path}: CUDA Toolkit {release} is missing. {RUN_SITE}.",
            )
        ]
    if nvcc["release"] != release:
        return [
            Finding(
                "fail",
                "cuda-drift",
                f"{nvcc_path} is CUDA {nvcc['release']} ({nvcc['version']}); the inventory wants "
                f"{release}. {RUN_SITE}.",
                evidence=dict(nvcc),
            )
        ]
    return [Finding("ok", "cuda", f"CUDA Toolkit {nvcc['version']} at {nvcc_path}.")]


def findings_for_gpu_count(expected: int | None, found: int) -> list[Finding]:
    if expected is not None and found != expected:
        return [
            Finding(
                "fail",
                "gpu-count-mismatch",
                f"Expected {expected} GPUs (expected_gpu_count), nvidia-smi sees {found}. "
                "A missing GPU is often a card that fell off the bus (`dmesg | grep -i xid`), "
                "a VM without it passed through, or the wrong kernel module flavor; a new GPU "
                "means the inventory (and the service's tensor parallelism) should follow.",
                evidence={"expected": expected, "found": found},
            )
        ]
    if found == 0:
        return []  # said by driver-missing
    return [Finding("ok", "gpu-count", f"{found} GPUs" + (" as expected." if expected else "."))]


def findings_for_gpu_model(expected: str | None, gpus: list[dict]) -> list[Finding]:
    """gpu-model-mismatch when expected_gpu_model is set and a GPU nvidia-smi sees is another
    model: the service was planned and validated for the expected one."""
    if not expected:
        return []
    others = other_gpu_models(expected, [gpu.get("name") for gpu in gpus])
    if not others:
        return []
    return [
        Finding(
            "fail",
            "gpu-model-mismatch",
            f"Expected {expected} (expected_gpu_model), nvidia-smi sees {', '.join(others)}. "
            "Validation planned the memory fit, tensor parallelism and backends for the "
            "expected model, and the deploy refuses this host: set expected_gpu_model to the "
            "model it has (or unset it), then validate again.",
            evidence={"expected": expected, "found": [gpu.get("name") for gpu in gpus]},
        )
    ]


def findings_for_persistence(rows: list[dict], persistenced: dict) -> list[Finding]:
    """persistence-mode-off for GPUs that report Disabled, persistence-mode-unknown for those
    whose mode was not read (no column, N/A): only Enabled counts as on."""
    findings: list[Finding] = []
    off = [int(row["index"]) for row in rows if row.get("persistence_mode") == "Disabled"]
    if off:
        findings.append(
            Finding(
                "warn",
                "persistence-mode-off",
                f"Persistence mode is off on GPUs {off}: each process start re-initialises them "
                "(seconds per GPU) and clocks reset. Enable nvidia-persistenced "
                f"(it is {persistenced.get('ActiveState', 'unknown')}).",
                evidence={"gpus": off},
            )
        )
    unknown = {
        int(row["index"]): unread_fields(row, ["persistence_mode"])["persistence_mode"]
        for row in rows
        if row.get("persistence_mode") not in ("Enabled", "Disabled")
    }
    if unknown:
        why = {"missing": "no persistence_mode column", "unreadable": "nvidia-smi printed N/A"}
        shown = "; ".join(sorted({why[state] for state in unknown.values()}))
        findings.append(
            Finding(
                "warn",
                "persistence-mode-unknown",
                f"Persistence mode of GPUs {sorted(unknown)} was not read ({shown}); expected "
                "Enabled or Disabled. Check with `nvidia-smi --query-gpu=index,persistence_mode "
                "--format=csv`.",
                evidence={"gpus": sorted(unknown), "read": {str(g): unknown[g] for g in unknown}},
            )
        )
    if rows and not findings:
        findings.append(
            Finding("ok", "persistence-mode", f"persistence mode on for all {len(rows)} GPUs.")
        )
    return findings


def findings_for_iommu(iommu: dict, gpu_count: int, vm: str | None) -> list[Finding]:
    """IOMMU address translation (on, without passthrough) sends peer-to-peer traffic up to
    the root complex: slow, or hanging NCCL on some platforms."""
    if gpu_count < 2 or not iommu["active"] or iommu_passthrough(iommu) or vm:
        return []
    settings = " ".join(f"{k}={v}" for k, v in iommu["cmdline"].items()) or "on by default"
    return [
        Finding(
            "warn",
            "iommu-translation",
            f"The IOMMU translates DMA addresses ({settings}) "
            "and the kernel command line has no iommu=pt (or iommu.passthrough=1): "
            "GPU peer traffic goes through the root "
            "complex. Add iommu=pt unless you need translation for device isolation.",
            evidence=iommu,
        )
    ]


def findings_for_sglang_version(expected: str, installed: str | None, venv: str) -> list[Finding]:
    if installed == expected:
        return [Finding("ok", "sglang-version", f"SGLang {installed} in {venv}.")]
    found = f"SGLang {installed}" if installed else "no SGLang"
    return [
        Finding(
            "fail",
            "sglang-version-drift",
            f"{venv} holds {found}; the inventory pins {expected}. {RUN_SITE}.",
            evidence={"expected": expected, "installed": installed},
        )
    ]


def findings_for_dkms(dkms: dict | None, installed: str | None) -> list[Finding]:
    """Has DKMS built the installed module for the newest installed kernel, the one the host
    boots next? ``installed``: the kernel module package's version (None: no driver)."""
    if not dkms or not dkms["kernels"] or installed is None:
        return []  # no kernel of its own (a container), or no driver to build
    newest = dkms["kernels"][-1]
    evidence = {"kernel": newest, "module": installed, "built": dkms["built"].get(newest, [])}
    if installed in dkms["built"].get(newest, []):
        return [
            Finding(
                "ok",
                "dkms-module",
                f"DKMS built NVIDIA module {installed} for kernel {newest}, the newest installed",
                evidence=evidence,
            )
        ]
    return [
        Finding(
            "warn",
            "dkms-module-missing",
            f"Kernel {newest}, the newest installed (it boots next), has no NVIDIA module "
            f"{installed} built by DKMS: after the reboot no GPU will work. Install its headers "
            f"(linux-headers-{newest}; {RUN_SITE} installs the flavor's headers metapackage) "
            f"and run `dkms autoinstall -k {newest}`.",
            evidence=evidence,
        )
    ]


def findings_for_driver_update(
    branch: int, installed: str | None, candidate: str | None, updating: bool
) -> list[Finding]:
    """Does apt offer a newer release of the pinned branch than the installed one?
    ``updating``: the inventory moves to it (nvidia_driver_update_within_branch)."""
    from pyinfra_sglang.driver.nvidia import newer_on_branch

    if not newer_on_branch(installed, candidate, branch):
        return []
    then = (
        f"{RUN_SITE} (nvidia_driver_update_within_branch is on)"
        if updating
        else "Set nvidia_driver_update_within_branch: true and run deploy/site.py"
    )
    return [
        Finding(
            "warn",
            "driver-update-available",
            f"apt offers NVIDIA driver {candidate} on branch {branch}; {installed} is installed. "
            f"Releases within a branch carry security fixes. {then}, then reboot.",
            evidence={"installed": installed, "candidate": candidate, "branch": branch},
        )
    ]


def findings_for_secure_boot(secure_boot: dict | None, installed: str | None) -> list[Finding]:
    """With Secure Boot on, the kernel loads only a signed nvidia module (enrolled key)."""
    if not secure_boot or not secure_boot.get("enabled") or installed is None:
        return []
    if secure_boot.get("module_signer"):
        return []
    return [
        Finding(
            "fail",
            "secure-boot-unsigned-module",
            f"Secure Boot is on ({secure_boot['source']}) and the nvidia module for the running "
            "kernel carries no signature (or was not built): the kernel rejects it at load "
            '("Key was rejected by service"). Set nvidia_mok_key_file and nvidia_mok_cert_file '
            f"to an enrolled MOK key pair; {RUN_SITE}, so DKMS signs the module.",
            evidence={"installed": installed, "source": secure_boot["source"]},
        )
    ]


def findings_for_model(model: dict | None) -> list[Finding]:
    """The weights the service serves: there, whole, and at the revision the inventory
    names. ``model``: {"name", "local", "revision", "commit", "files", "broken",
    "incomplete", "hub_commit"} as checks/audit.read_model reads them."""
    if not model:
        return []
    name, revision = model["name"], model.get("revision")
    evidence = {k: model.get(k) for k in ("revision", "commit", "files", "hub_commit")}
    if not model.get("files"):
        where = (
            "its local path has no config.json"
            if model.get("local")
            else (f"no snapshot of revision {revision} in the Hub cache")
        )
        return [
            Finding(
                "fail",
                "model-missing",
                f"The model {name} is not on the host: {where}. {RUN_SITE} (the model role "
                "downloads it).",
                evidence=evidence,
            )
        ]
    findings = []
    if model.get("broken") or model.get("incomplete"):
        findings.append(
            Finding(
                "fail",
                "model-incomplete",
                f"The snapshot of {name} at {model.get('commit')} is incomplete: "
                f"{model.get('broken', 0)} files without their data, "
                f"{model.get('incomplete', 0)} cut-off downloads. {RUN_SITE}: the download "
                "resumes.",
                evidence={
                    **evidence,
                    "broken": model.get("broken"),
                    "incomplete": model.get("incomplete"),
                },
            )
        )
    hub = model.get("hub_commit")
    if hub and model.get("commit") and hub != model["commit"]:
        findings.append(
            Finding(
                "warn",
                "model-revision-drift",
                f"{name}'s {revision} is commit {hub} on the Hub now; the host has "
                f"{model['commit']}. Pin sglang_model_revision to the commit to serve, and "
                f"{RUN_SITE}.",
                evidence=evidence,
            )
        )
    if not findings:
        findings.append(
            Finding(
                "ok",
                "model",
                f"{name} at {model.get('commit') or 'its local path'}: {model['files']} files",
                evidence=evidence,
            )
        )
    return findings


def findings_for_flash_attn(
    version: str | None,
    archs_override: list[str] | None,
    flash_attn: dict | None,
    gpus: list[dict],
    build: bool = True,
    off_reason: str | None = None,
) -> list[Finding]:
    """Does the installed flash-attn have kernels for the GPUs found (or exactly the
    inventory's ``flash_attn_cuda_archs``)? The same rule as the role's rebuild. Judged only
    for the pinned version: another one is rebuilt by the next deploy anyway. With ``build``
    off (not needed, or flash_attn_build: false; ``off_reason`` says which) no flash-attn is
    expected: said so, with what is there."""
    if not build:
        return _flash_attn_off(flash_attn, gpus, off_reason)
    if not flash_attn or not version or flash_attn.get("installed") != version:
        return []
    recorded = flash_attn.get("built_archs")
    built = tuple(recorded) if recorded else None
    gpu_archs = archs_from_compute_caps([gpu.get("compute_cap") or "" for gpu in gpus])
    evidence = {"built": recorded, "gpus": list(gpu_archs), "flash_attn_cuda_archs": archs_override}
    reason = rebuild_reason(built, gpu_archs, archs_override)
    if reason:
        return [
            Finding(
                "fail",
                "flash-attn-arch-mismatch",
                f'flash-attn {version}: {reason}; its kernels then fail with "no kernel image '
                f'is available for execution on the device". {RUN_SITE} (it builds '
                "flash-attn again for them).",
                evidence=evidence,
            )
        ]
    missing = uncovered_archs(built or (), gpu_archs)
    if archs_override and missing:
        return [
            Finding(
                "fail",
                "flash-attn-arch-mismatch",
                f"flash-attn {version} is built for flash_attn_cuda_archs "
                f"({archs_text(archs_override)}), which lacks the GPUs' {archs_text(missing)}: "
                "add them to flash_attn_cuda_archs, or unset it to build for the GPUs found, "
                "then run `pyinfra INVENTORY deploy/site.py`.",
                evidence=evidence,
            )
        ]
    if not gpu_archs and not archs_override:
        return []
    against = "flash_attn_cuda_archs" if archs_override else f"the GPUs' {archs_text(gpu_archs)}"
    return [
        Finding(
            "ok",
            "flash-attn",
            f"flash-attn {version} built for {archs_text(built or ())} ({against}).",
            evidence=evidence,
        )
    ]


def _flash_attn_off(
    flash_attn: dict | None, gpus: list[dict], reason: str | None = None
) -> list[Finding]:
    """flash-attn is not built here: missing flash-attn is what the inventory asks for; one
    found anyway (built before, or installed by hand) is reported as it is, the deploy
    leaves it."""
    off = f"flash-attn is not built: {reason or 'flash_attn_build is false in the inventory'}"
    if not flash_attn or not flash_attn.get("installed"):
        return [Finding("ok", "flash-attn-off", f"{off}; none in the venv.")]
    installed = flash_attn["installed"]
    recorded = flash_attn.get("built_archs")
    built = tuple(recorded) if recorded else None
    gpu_archs = archs_from_compute_caps([gpu.get("compute_cap") or "" for gpu in gpus])
    evidence = {"installed": installed, "built": recorded, "gpus": list(gpu_archs)}
    missing = uncovered_archs(built or (), gpu_archs) if gpu_archs else ()
    if built is None or missing:
        lacks = (
            "its build record names no CUDA architectures"
            if built is None
            else f"built for {archs_text(built)}, without the GPUs' {archs_text(missing)}"
        )
        return [
            Finding(
                "warn",
                "flash-attn-off",
                f"{off}, and the venv has flash-attn {installed} anyway, {lacks}: what imports "
                "it fails on those GPUs. Uninstall it, or set flash_attn_build: true and run "
                "`pyinfra INVENTORY deploy/site.py`.",
                evidence=evidence,
            )
        ]
    return [
        Finding(
            "ok",
            "flash-attn-off",
            f"{off}; the venv has flash-attn {installed} anyway, built for {archs_text(built)}.",
            evidence=evidence,
        )
    ]


def findings_for_driver_support(
    branch: int | None, loaded: dict | None, today: str | None, host_source: bool = False
) -> list[Finding]:
    """Is the pinned branch (and the loaded one, when another) one NVIDIA supports on the
    audit's date ``today`` ("YYYY-MM-DD"; None in records made before it was recorded: not
    judged)? A feature branch, one off NVIDIA's matrix or past its end warns, naming the
    supported ones (data/nvidia.toml [[branch_support]])."""
    from pyinfra_sglang.driver.nvidia import (
        branch_support,
        driver_branch_of,
        support_ended,
        supported_branches,
    )

    if today is None:
        return []
    running = driver_branch_of(loaded["version"]) if loaded else None
    if host_source:  # the running branch is the expected one
        branch = running
    if branch is None:
        return []
    branches = [branch]
    if running is not None and running != branch:
        branches.append(running)
    supported = supported_branches(today)
    names = ", ".join(row.text() for row in supported) or "none in data/nvidia.toml"
    findings = []
    for each in branches:
        row = branch_support(each)
        role = "pinned" if each == branch else "running"
        evidence = {"branch": each, "date": today, "supported": [r.branch for r in supported]}
        if row is None:
            why = "is not in the support table (data/nvidia.toml [[branch_support]])"
        elif support_ended(row, today):
            why = f"is {row.text()}: its support ended"
        elif row.support == "feature":
            off = "" if row.on_matrix else " NVIDIA no longer lists"
            why = f"is a short-lived new-feature branch{off}: no fixes once the next one ships"
        elif not row.on_matrix:
            why = "is no longer on NVIDIA's driver matrix"
        else:
            findings.append(
                Finding(
                    "ok",
                    "driver-support",
                    f"The {role} driver branch {row.text()} is supported by NVIDIA on {today}.",
                    evidence=evidence,
                )
            )
            continue
        findings.append(
            Finding(
                "warn",
                "driver-support",
                f"The {role} driver branch {each} {why} (on {today}). NVIDIA supports {names}: "
                + (
                    "ask the host's owner for one of them, or let the deploy install one "
                    '(nvidia_driver_source = "managed").'
                    if host_source
                    else "set nvidia_driver_branch to one of them and run deploy/site.py, "
                    "then reboot."
                ),
                evidence=evidence,
            )
        )
    return findings


def findings_for_driver_toolkit(
    loaded: dict | None, nvcc: dict | None, host_source: bool = False
) -> list[Finding]:
    """Does the loaded driver run the installed CUDA toolkit (CUDA release notes, Table 3)?
    Below the release's GA minimum but on its major's floor it runs through minor-version
    compatibility only (no JIT of newer PTX): a warning; below the floor: a failure. nvcc
    does not tell the update apart, so the GA row is the bar here (validation holds the
    inventory to the newest update's)."""
    from pyinfra_sglang.driver.nvidia import (
        TOOLKIT_SOURCE,
        minor_version_compat_floor,
        toolkit_driver_minimums,
        version_key,
    )

    if not loaded or not nvcc:
        return []
    rows = toolkit_driver_minimums(nvcc["release"])
    if not rows:
        return []
    driver, ga = loaded["version"], rows[0]
    evidence = {"driver": driver, "cuda": nvcc["version"], "needs": ga.driver}
    if version_key(driver) >= version_key(ga.driver):
        return [
            Finding(
                "ok",
                "driver-toolkit",
                f"Driver {driver} runs CUDA {nvcc['release']} ({ga.text()}).",
                evidence=evidence,
            )
        ]
    floor = minor_version_compat_floor(nvcc["release"])
    limited = floor is not None and version_key(driver)[0] >= floor
    consequence = (
        f"it runs CUDA {nvcc['release']} only through minor-version compatibility (driver "
        f">= {floor}): no JIT of the toolkit's newer PTX, which Triton and FlashInfer use"
        if limited
        else f"CUDA {nvcc['release']} programs do not start on it"
    )
    return [
        Finding(
            "warn" if limited else "fail",
            "driver-toolkit",
            f"The loaded driver {driver} is older than the CUDA {nvcc['release']} toolkit "
            f"installed needs: {ga.text()} ({TOOLKIT_SOURCE}); {consequence}. "
            + (
                "Set cuda_version to a release the host's driver runs fully, or ask the "
                "host's owner for a newer driver."
                if host_source
                else "Move nvidia_driver_branch up (or cuda_version down) and run deploy/site.py."
            ),
            evidence={**evidence, "minor_version_floor": floor},
        )
    ]
