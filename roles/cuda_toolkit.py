"""CUDA Toolkit (toolkit only: no driver pulled), on PATH and in the linker's path, with a
check that nvcc reports the release the inventory asked for."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.operations import server

from checks.facts import FileStates, HostDriverState, NvccRelease, read_once, read_together
from pyinfra_sglang.driver.nvidia import cuda_paths
from pyinfra_sglang.inventory import host_config
from pyinfra_sglang.paths import template
from roles.common import ensure_packages, template_file
from roles.host_driver import host_keeps


@operation()
def nvcc_reports_release(nvcc: str, release: str):
    """Fail unless ``nvcc --version`` reports ``release``. Checked from facts when nvcc was
    already there; checked on the host right after the install otherwise."""
    found = read_once(host, NvccRelease, path=nvcc)
    if found is None:
        # Installed by this run: the facts predate it, so check on the host now.
        quoted = shlex.quote(nvcc)
        yield StringCommand(
            f"{quoted} --version | grep -qF {shlex.quote(f'release {release},')} || "
            f"{{ echo {shlex.quote(f'{nvcc} does not report CUDA release {release}:')} >&2; "
            f"{quoted} --version >&2; exit 1; }}"
        )
        return
    if found["release"] != release:
        raise OperationError(
            f"{nvcc} reports CUDA release {found['release']} (V{found['version']}), "
            f"expected {release}: check which package provides it"
        )
    host.noop(f"{nvcc} reports release {release} (V{found['version']})")


@deploy("CUDA Toolkit")
def cuda_toolkit() -> None:
    """Install the CUDA Toolkit alone, on PATH and the linker's path.

    `cuda-toolkit-<major>-<minor>` without a driver, `/etc/profile.d/cuda.sh` and
    `/etc/ld.so.conf.d/cuda.conf`, then a check that `nvcc --version` reports the release.

    + cuda_version: the release, e.g. `13.1`
    + nvidia_driver_source: `host` uses the host's toolkits, installing none
    """
    config = host_config(host)
    version = config.cuda_version
    if config.uses_host_driver:
        toolkits = read_once(host, HostDriverState)["toolkits"]
        found = ", ".join(f"CUDA {r} at {n}" for r, n in sorted(toolkits.items())) or "none"
        host_keeps(
            name="Use the CUDA toolkits the host has",
            what=f"CUDA toolkits found: {found}",
            reason='nvidia_driver_source = "host" installs none',
        )
        return
    paths = cuda_paths(version)
    # The toolkit's files in one command: its nvcc, and the two files written here (compared
    # in one read: template_file's compared).
    files_read = (paths["profile_script"], paths["ld_conf"])
    read_together(
        host,
        (NvccRelease, {"path": paths["nvcc"]}),
        (FileStates, {"paths": tuple(sorted(files_read))}),
    )
    ensure_packages(f"Install CUDA Toolkit {version}", [paths["package"]])
    template_file(
        name="Put CUDA on PATH for login shells",
        src=template("cuda-profile.sh.j2"),
        dest=paths["profile_script"],
        compared=files_read,
        cuda_version=version,
        cuda_home=paths["home"],
        user="root",
        group="root",
        mode="644",
    )
    ld_conf = template_file(
        name="Add CUDA's libraries to the linker's path",
        src=template("cuda-ld.conf.j2"),
        dest=paths["ld_conf"],
        compared=files_read,
        cuda_version=version,
        cuda_home=paths["home"],
        user="root",
        group="root",
        mode="644",
    )
    server.shell(name="Refresh the linker cache", commands=["ldconfig"], _if=ld_conf.did_change)
    nvcc_reports_release(
        name=f"Check that nvcc reports CUDA {version}", nvcc=paths["nvcc"], release=version
    )
