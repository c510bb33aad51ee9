"""The NVIDIA driver, its repository, Secure Boot, the CUDA Toolkit and reboots
(roles/nvidia_repo.py, nvidia_driver.py, secure_boot.py, cuda_toolkit.py, host_driver.py,
reboot.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BeforeValidator, Field, HttpUrl, StrictBool, model_validator

from pyinfra_sglang import data
from pyinfra_sglang.config.types import (
    DRIVER_VERSION_PATTERN,
    FieldGroup,
    OptionalPath,
    allowed,
    apt_line_fits,
    field_error,
    no_bool,
    one_of,
    version_text,
)
from pyinfra_sglang.driver.mirror_login import login_problem, split_login
from pyinfra_sglang.driver.nvidia import minor_version_compat_floor


def int_from_digits(value: Any) -> Any:
    # "590" from a Python inventory means the branch 590.
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


_nvidia = data.nvidia()


DriverBranch = Annotated[
    Literal[_nvidia.driver_branches],  # type: ignore[valid-type]
    BeforeValidator(int_from_digits),
]


CudaVersion = Annotated[
    Literal[_nvidia.cuda_versions],  # type: ignore[valid-type]
    version_text(_nvidia.default_cuda_version),
]


def _mirror_login_fits(url: HttpUrl) -> HttpUrl:
    # Refused here as the NVIDIA repository role would refuse it
    # (pyinfra_sglang/driver/mirror_login.py).
    _, login = split_login(str(url))
    problem = login_problem(login) if login else None
    if problem:
        raise ValueError(problem)
    return url


class DriverFields(FieldGroup):
    """The NVIDIA driver, its repository, Secure Boot, the CUDA Toolkit and reboots."""

    nvidia_driver_source: Literal["managed", "host"] = Field(
        "managed",
        description=(
            "`managed`: the deploy installs NVIDIA's repository, the pinned driver (and "
            "Fabric Manager on NVSwitch boards) and the CUDA Toolkit. `host`: the driver, "
            "Fabric Manager and toolkits the host already runs (a provider's image, a VM's "
            "host, a runfile) are used as they are; the repository, driver and toolkit roles "
            "change nothing, and planning refuses a driver too old for the GPUs or for "
            "`cuda_version`'s builds, and a missing toolkit where flash-attn is built "
            "([hosts.md](hosts.md))."
        ),
        json_schema_extra=allowed("managed, host"),
    )

    nvidia_driver_remove_foreign: StrictBool = Field(
        False,
        description=(
            "Managed mode on a host holding NVIDIA driver packages of the distribution's "
            "archive (Ubuntu's `nvidia-driver-580-server`, `linux-modules-nvidia-*`...) or "
            "NVIDIA modules DKMS holds for no installed package: purge them right before the "
            "driver's apt transaction (`--dry` lists them; a reboot follows). Off: such a host is "
            "refused before any change, naming what was found. A runfile driver is always "
            "refused: only its own `nvidia-uninstall` removes it."
        ),
        json_schema_extra=allowed("true, false"),
    )

    nvidia_driver_branch: DriverBranch = Field(  # type: ignore[valid-type]
        _nvidia.default_driver_branch,
        description="NVIDIA driver branch, locked with `nvidia-driver-pinning-<branch>`.",
        json_schema_extra=allowed(one_of(_nvidia.driver_branches)),
    )

    nvidia_driver_version: (
        Annotated[str, version_text("590.48.01"), Field(pattern=DRIVER_VERSION_PATTERN)] | None
    ) = Field(
        None,
        description=(
            "Exact NVIDIA driver release on `nvidia_driver_branch` (e.g. 590.48.01), locked "
            "with NVIDIA's `nvidia-driver-pinning-<version>` instead of the branch's pin. "
            "Unset: the newest release of the branch."
        ),
        json_schema_extra=allowed("a release of nvidia_driver_branch such as 590.48.01, or unset"),
    )

    nvidia_driver_update_within_branch: StrictBool = Field(
        False,
        description=(
            "Move the driver to the newest release of its branch that apt offers (security "
            "fixes arrive this way; unattended-upgrades is kept off NVIDIA's packages), with "
            "the reboot handling of any driver change. Off: the audit warns when one is "
            "offered."
        ),
        json_schema_extra=allowed("true, false"),
    )

    nvidia_mok_key_file: OptionalPath = Field(
        None,
        description=(
            "File on the controller holding the private key (PEM) of a Machine Owner Key "
            "enrolled on hosts with Secure Boot on: DKMS signs the NVIDIA module with it "
            "(written 0600 where DKMS signs from). A host with Secure Boot on is refused "
            "without it."
        ),
        json_schema_extra=allowed("a path on the controller, or unset"),
    )

    nvidia_mok_cert_file: OptionalPath = Field(
        None,
        description=(
            "File on the controller holding that key's certificate (DER), the one enrolled "
            "with `mokutil --import`; the deploy checks it is enrolled (`mokutil --test-key`)."
        ),
        json_schema_extra=allowed("a path on the controller, or unset"),
    )

    nvidia_kernel_modules: Literal["open", "proprietary"] = Field(
        "open",
        description="Kernel module flavor; Blackwell GPUs need the open modules.",
        json_schema_extra=allowed("open, proprietary"),
    )

    nvidia_driver_install: Literal["compute", "full"] = Field(
        "compute",
        description=(
            "`compute`: headless driver (CUDA libraries, kernel modules, nvidia-smi); "
            "`full`: NVIDIA's full driver metapackage."
        ),
        json_schema_extra=allowed("compute, full"),
    )

    nvidia_apt_mirror: (
        Annotated[HttpUrl, AfterValidator(apt_line_fits), AfterValidator(_mirror_login_fits)] | None
    ) = Field(
        None,
        description=(
            "Base URL that replaces https://developer.download.nvidia.com/compute/cuda/repos "
            "(for air-gapped sites)."
        ),
        json_schema_extra=allowed("an http(s) URL, or unset for NVIDIA's repository"),
    )

    nvidia_keyring_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = Field(
        None,
        description=(
            "sha256 of the cuda-keyring .deb the repository (or `nvidia_apt_mirror`) serves "
            "for this host: checked before it is installed. Unset: the sha256 pinned in "
            "data/nvidia.toml for the host's platform, else the fingerprint of NVIDIA's key "
            "it must carry. Needed for an http:// mirror, and for a mirror that signs with "
            "its own key."
        ),
        json_schema_extra=allowed("64 lowercase hex digits, or unset"),
    )

    cuda_version: CudaVersion = Field(  # type: ignore[valid-type]
        _nvidia.default_cuda_version,
        description="CUDA Toolkit release (installs `cuda-toolkit-<major>-<minor>`, no driver).",
        json_schema_extra=allowed(one_of(_nvidia.cuda_versions)),
    )

    allow_reboot: StrictBool = Field(
        False,
        description="May a deploy reboot the host (after a driver change)?",
        json_schema_extra=allowed("true, false"),
    )

    reboot_timeout_s: Annotated[int, BeforeValidator(no_bool), Field(ge=60, le=86400)] = Field(
        1800,
        description=(
            "Seconds a deploy waits for a host to come back from a reboot it made: bare-metal "
            "GPU servers spend minutes in POST and memory training before the OS boots."
        ),
        json_schema_extra=allowed("60..86400"),
    )

    @property
    def uses_host_driver(self) -> bool:
        """The driver, Fabric Manager and toolkits are the host's own (nvidia_driver_source =
        "host"): the roles that install them change nothing. The one place this is asked."""
        return self.nvidia_driver_source == "host"

    @model_validator(mode="after")
    def _plain_http_mirror_needs_a_pinned_keyring(self) -> Self:
        # Over http anyone on the path can swap the keyring, and with it every package's
        # signature check; a pinned sha256 makes the download's transport irrelevant.
        mirror = self.nvidia_apt_mirror
        if mirror is not None and mirror.scheme == "http" and not self.nvidia_keyring_sha256:
            raise field_error(
                "nvidia_apt_mirror",
                f"{mirror.scheme}:// mirror without nvidia_keyring_sha256: the keyring it "
                "serves is the trust anchor of every NVIDIA package. Use https://, or pin the "
                "keyring's sha256 in nvidia_keyring_sha256",
            )
        return self

    @model_validator(mode="after")
    def _driver_version_on_branch(self) -> Self:
        version = self.nvidia_driver_version
        if version and not version.startswith(f"{self.nvidia_driver_branch}."):
            raise field_error(
                "nvidia_driver_version",
                f"{version} is not a release of nvidia_driver_branch "
                f"{self.nvidia_driver_branch}: set the branch to {version.split('.')[0]}, or a "
                f"version {self.nvidia_driver_branch}.x",
            )
        if version and self.nvidia_driver_update_within_branch:
            raise field_error(
                "nvidia_driver_update_within_branch",
                f"nvidia_driver_version {version} locks one release; moving within the branch "
                "contradicts it. Unset one of them",
            )
        return self

    @model_validator(mode="after")
    def _host_driver_is_not_installed(self) -> Self:
        # The host's own driver is used as it is: settings of the driver the deploy would
        # install contradict it.
        if not self.uses_host_driver:
            return self
        for name in (
            "nvidia_driver_version",
            "nvidia_driver_update_within_branch",
            "nvidia_driver_remove_foreign",
        ):
            if getattr(self, name):
                raise field_error(
                    name,
                    f'nvidia_driver_source = "host" uses the driver the host runs; {name} '
                    "sets up the one the deploy installs. Unset one of them",
                )
        return self

    @model_validator(mode="after")
    def _driver_runs_the_toolkit(self) -> Self:
        # Below the release's own minimum, a branch on its major's floor still runs it
        # through minor-version compatibility (no JIT of newer PTX): validation warns
        # (semantic_checks). Below the floor nothing starts: refused. The host's own driver
        # is judged at planning, from what it runs.
        floor = minor_version_compat_floor(self.cuda_version)
        if not self.uses_host_driver and floor and self.nvidia_driver_branch < floor:
            raise field_error(
                "nvidia_driver_branch",
                f"branch {self.nvidia_driver_branch} does not run CUDA {self.cuda_version} "
                f"programs at all (CUDA minor-version compatibility: "
                f"{self.cuda_version.split('.')[0]}.x needs branch {floor} or later). Choose "
                "a newer driver, or an older cuda_version",
            )
        return self
