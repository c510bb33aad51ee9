"""deploy/site.py's Python environment and flash-attn roles on real Debian 12 test hosts,
with PyPI and PyTorch's index replaced by a local index (real uv and build-tool wheels;
stand-in sglang, torch and flash-attn, whose build records the environment it saw)."""

from __future__ import annotations

import json
import shlex

import pytest

from pyinfra_sglang.inventory import HostConfig
from roles.python_env import CREDENTIALS_DIR
from tests.hosts import aptrepo
from tests.hosts.apply import apply
from tests.hosts.audit_report import assert_audit_changed_nothing

pytestmark = pytest.mark.hosts

# One venv per SGLang / Python / CUDA combination (Debian 12's Python 3.11 on test hosts).
VENV = HostConfig(python_version="3.11").venv_path
VENV_0_5_22 = HostConfig(python_version="3.11", sglang_version="0.5.22").venv_path
SITE = f"{VENV}/lib/python3.11/site-packages"
RECORD = "/var/log/pyinfra-sglang/flash-attn-{}-build.json"


def venv_versions(host_pool, test_host, venv: str = VENV) -> dict[str, str]:
    out = host_pool.run(test_host, f"ls -d {venv}/lib/python3.11/site-packages/*.dist-info").stdout
    names = [line.rsplit("/", 1)[-1].removesuffix(".dist-info") for line in out.split()]
    return dict(name.split("-", 1) for name in names)


def test_venv_holds_the_pins_and_flash_attn_was_built_with_the_plan(
    host_pool, hosts, inventory, site_first_apply
):
    for h in hosts:
        assert "Python environment | Install SGLang 0.5.23" in site_first_apply.changed(h.address)
        assert "flash-attn | Build flash-attn 2.8.3" in site_first_apply.changed(h.address)
        versions = venv_versions(host_pool, h)
        assert versions["sglang"] == "0.5.23"  # PyPI's, not the torch index's 0.5.2
        # The CUDA builds from the torch index (PyPI's stand-ins carry no +cu130), kept by
        # SGLang's install from PyPI; the kernel at the release's pin, from PyPI.
        assert versions["torch"] == "2.14.1+cu130"
        assert versions["torchvision"] == "0.29.1+cu130"
        assert versions["torchaudio"] == "2.11.0+cu130"
        assert versions["sglang_kernel"] == "0.4.10"
        assert versions["flash_attn"] == "2.8.3"
        assert host_pool.run(h, f"{VENV}/bin/python --version").stdout.startswith("Python 3.11.")
        assert host_pool.run(h, "/opt/sglang/uv/bin/uv --version").stdout.startswith("uv 0.13.9")

        # What the build saw is what the role planned and recorded.
        seen = json.loads(host_pool.run(h, f"cat {SITE}/flash_attn/build_env.json").stdout)
        record = json.loads(host_pool.run(h, f"cat {RECORD.format('2.8.3')}").stdout)
        for key in (
            "MAX_JOBS",
            "NVCC_THREADS",
            "FLASH_ATTN_CUDA_ARCHS",
            "FLASH_ATTENTION_FORCE_BUILD",
            "CUDA_HOME",
        ):
            assert seen[key] == record["env"][key], key
        assert seen["FLASH_ATTN_CUDA_ARCHS"] == "90"  # the replayed GPUs are H200s (9.0)
        assert seen["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
        assert seen["CUDA_HOME"] == "/usr/local/cuda-13.1"
        assert seen["torch_version"] == "2.14.1+cu130"  # no build isolation
        assert record["seconds"] >= 0 and record["log"].endswith("flash-attn-2.8.3-build.log")
        assert record["archs"] == ["90"]
        # The plan fits: threads x 5 GB under 75% of the host's memory, threads <= cores.
        mem_kb = int(host_pool.run(h, "awk '/MemTotal/ {print $2}' /proc/meminfo").stdout)
        cores = int(host_pool.run(h, "nproc").stdout)
        threads = int(seen["MAX_JOBS"]) * int(seen["NVCC_THREADS"])
        assert threads * 5 <= 0.75 * mem_kb / 1024**2 and threads <= cores
    assert "flash-attn 2.8.3 build plan: MAX_JOBS=" in site_first_apply.stderr


def test_one_command_with_both_indexes_would_take_the_torch_indexs_sglang(
    host_pool, hosts, python_index, site_first_apply
):
    """What the role ran before: one uv command, PyPI as --index-url and the torch index as
    --extra-index-url. uv takes every package the extra index carries from it alone, and the
    torch index carries an sglang (0.5.2): the pinned release is not found there."""
    h = hosts[0]
    scratch = "/root/both-indexes-venv"
    host_pool.run(h, f"/opt/sglang/uv/bin/uv venv --clear -q {scratch}")
    try:
        result = host_pool.run(
            h,
            f"/opt/sglang/uv/bin/uv pip install --dry-run --python {scratch}/bin/python "
            f"--index-url {python_index.pypi_url} --extra-index-url {python_index.torch_url} "
            "sglang==0.5.23",
            check=False,
        )
        assert result.returncode != 0, result.stdout
        assert "sglang==0.5.23" in result.stderr and "0.5.2" in result.stderr, result.stderr
        # The role's order on the same indexes: each command sees one index.
        assert venv_versions(host_pool, h)["sglang"] == "0.5.23"
    finally:
        host_pool.run(h, f"rm -rf {scratch}")


CAPTURE_CHOICE = "/etc/nvidia-smi-replay/capture"
BUILD_OP = "flash-attn | Build flash-attn 2.8.3"
SERVE_OP = "SGLang service | Serve dense-bf16 with SGLang 0.5.23"


def flash_attn_findings(inventory, report_dir, address: str) -> list[tuple[str, str, str]]:
    """The audit's flash-attn findings on one host: (level, code, message)."""
    result = apply(
        inventory,
        "deploy/audit.py",
        options=("--limit", address, "--data", f"audit_report_dir={report_dir}"),
    )
    assert_audit_changed_nothing(result, report_dir)
    report = json.loads((report_dir / f"{address}.json").read_text())
    return [
        (f["level"], f["code"], f["message"])
        for f in report["findings"]
        if f["code"].startswith("flash-attn")
    ]


def test_a_gpu_upgrade_to_another_architecture_rebuilds_flash_attn_once(
    host_pool, hosts, inventory, tmp_path
):
    upgraded, other = hosts
    record = RECORD.format("2.8.3")
    # Built for the replayed H200s (9.0), and the record says so.
    assert json.loads(host_pool.run(upgraded, f"cat {record}").stdout)["archs"] == ["90"]
    again = apply(inventory, options=("-v",))
    again.assert_unchanged()
    assert (
        f"[{upgraded.address}] noop: flash-attn 2.8.3 is installed, built for 90 (the GPUs' 90)"
        in again.stderr
    )
    assert flash_attn_findings(inventory, tmp_path / "before", upgraded.address) == [
        ("ok", "flash-attn", "flash-attn 2.8.3 built for 90 (the GPUs' 90).")
    ]
    # The host's GPUs are now eight RTX PRO 6000 (12.0), as on the real server.
    host_pool.run(
        upgraded,
        f"mkdir -p {CAPTURE_CHOICE.rsplit('/', 1)[0]} "
        f"&& echo rtxpro6000x8-pcie-from-smiq > {CAPTURE_CHOICE}",
    )
    try:
        [(level, code, message)] = flash_attn_findings(
            inventory, tmp_path / "upgraded", upgraded.address
        )
        assert (level, code) == ("fail", "flash-attn-arch-mismatch"), message
        assert "the installed build has no kernels for 120 (built for 90)" in message

        rebuilt = apply(inventory, options=("-v",))
        assert rebuilt.returncode == 0 and not rebuilt.errors(), rebuilt.describe()
        # The same version built again, for 120 only; the service restarts for TP 8.
        assert rebuilt.changed(upgraded.address) == [BUILD_OP, SERVE_OP], rebuilt.describe()
        assert rebuilt.changed(other.address) == []
        assert (
            "building because the GPUs found are 120: the installed build has no kernels for 120"
            in rebuilt.stderr
        )
        seen = json.loads(host_pool.run(upgraded, f"cat {SITE}/flash_attn/build_env.json").stdout)
        assert seen["FLASH_ATTN_CUDA_ARCHS"] == "120"  # uv built it anew, no cached wheel
        written = json.loads(host_pool.run(upgraded, f"cat {record}").stdout)
        assert written["archs"] == ["120"] and written["env"]["FLASH_ATTN_CUDA_ARCHS"] == "120"
        assert venv_versions(host_pool, upgraded)["flash_attn"] == "2.8.3"

        settled = apply(inventory, options=("-v",))
        settled.assert_unchanged()
        assert (
            f"[{upgraded.address}] noop: flash-attn 2.8.3 is installed, built for 120 "
            "(the GPUs' 120)" in settled.stderr
        )
        assert flash_attn_findings(inventory, tmp_path / "after", upgraded.address) == [
            ("ok", "flash-attn", "flash-attn 2.8.3 built for 120 (the GPUs' 120).")
        ]
    finally:
        host_pool.run(upgraded, f"rm -f {CAPTURE_CHOICE}")
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
    # Back on the H200s: built for 90 again.
    assert json.loads(host_pool.run(upgraded, f"cat {record}").stdout)["archs"] == ["90"]


def unit_venv(host_pool, test_host) -> str:
    """The venv the server's unit runs from (its ExecStart's python)."""
    unit = host_pool.run(test_host, "cat /etc/systemd/system/sglang.service").stdout
    return unit.split("ExecStart=", 1)[1].split("/bin/python", 1)[0]


def test_a_new_release_goes_into_its_own_venv_and_back(host_pool, hosts, inventory):
    """A new SGLang release is built into a venv of its own beside the running one; the unit
    switches to it in the service step; going back switches back to the old venv, which was
    kept untouched, without building anything; venvs beyond the newest two are removed."""
    before = {h.address: venv_versions(host_pool, h) for h in hosts}
    # An older venv left by an earlier release: the oldest of three, so the one removed.
    stale = "/opt/sglang/venvs/0.5.9-py3.11-cu13.1"
    for h in hosts:
        host_pool.run(h, f"mkdir -p {stale} && touch -d '2 days ago' {stale}/pyvenv.cfg")
    new_pins = ("--data", "flash_attn_version=2.8.2", "--data", "sglang_version=0.5.22")
    try:
        result = apply(inventory, options=new_pins)
        assert result.returncode == 0 and not result.errors(), result.describe()
        for h in hosts:
            changed = result.changed(h.address)
            for op in (
                "Python environment | Create the virtualenv (Python 3.11)",
                "Python environment | Install SGLang 0.5.22",
                "flash-attn | Build flash-attn 2.8.2",
                "SGLang service | Serve dense-bf16 with SGLang 0.5.22",
                "SGLang service | Remove virtualenvs of earlier releases",
            ):
                assert op in changed, result.describe()
            after = venv_versions(host_pool, h, VENV_0_5_22)
            assert (after["sglang"], after["flash_attn"]) == ("0.5.22", "2.8.2")
            assert venv_versions(host_pool, h) == before[h.address]  # the old venv untouched
            assert unit_venv(host_pool, h) == VENV_0_5_22
            assert host_pool.run(h, f"test -e {stale}", check=False).returncode == 1
        again = apply(inventory, options=new_pins)
        again.assert_unchanged()
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
    for h in hosts:
        # Back to the kept venv: nothing to create, install or build; the server restarts.
        assert back.changed(h.address) == [SERVE_OP], back.describe()
        assert unit_venv(host_pool, h) == VENV
        assert venv_versions(host_pool, h)["flash_attn"] == "2.8.3"


def test_built_once_a_site_the_first_host_builds_and_the_other_installs_its_wheel(
    host_pool, hosts, inventory
):
    """flash_attn_build_once: the first host builds flash-attn and keeps its wheel; the
    controller hands the wheel to the other host, which installs it without building, and
    records the seed's build (same sha256)."""
    seed, other = hosts
    pins = ("--data", "flash_attn_version=2.8.2", "--data", "flash_attn_build_once=true")
    try:
        result = apply(inventory, options=pins)
        assert result.returncode == 0 and not result.errors(), result.describe()
        for h in hosts:
            assert "flash-attn | Build flash-attn 2.8.2" in result.changed(h.address)
            assert venv_versions(host_pool, h)["flash_attn"] == "2.8.2"
        assert f"[{seed.address}] flash-attn 2.8.2: its wheel (" in result.stderr
        assert f"goes to {other.address}" in result.stderr
        assert f"[{other.address}] flash-attn 2.8.2: installed flash_attn-2.8.2-" in result.stderr
        assert f"built on {seed.address}" in result.stderr
        print(
            *[line for line in result.stderr.splitlines() if "flash-attn 2.8.2:" in line], sep="\n"
        )
        record = f"cat {RECORD.format('2.8.2')}"
        records = {h.address: json.loads(host_pool.run(h, record).stdout) for h in hosts}
        seeds, others = records[seed.address], records[other.address]
        assert others["copied_from"] == seed.address
        assert others["sha256"] == seeds["sha256"] and others["archs"] == seeds["archs"]
        # The wheel on the other host is the seed's, byte for byte, and was not built there:
        # the stand-in's build records the environment it ran in (one build, on the seed).
        for h in hosts:
            wheel = shlex.quote(records[h.address]["wheel"])
            assert host_pool.run(h, f"sha256sum {wheel}").stdout.split()[0] == seeds["sha256"]
        built = [host_pool.run(h, f"cat {SITE}/flash_attn/build_env.json").stdout for h in hosts]
        assert built[0] == built[1]
        log = host_pool.run(other, "cat /var/log/pyinfra-sglang/flash-attn-2.8.2-build.log").stdout
        assert "Building wheel" not in log and "Successfully installed" in log, log
        again = apply(inventory, options=pins)
        again.assert_unchanged()
    finally:
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()


def test_impossible_plan_refuses_before_any_change(host_pool, hosts, inventory):
    before = {h.address: venv_versions(host_pool, h) for h in hosts}
    result = apply(
        inventory,
        options=("--data", "flash_attn_version=2.8.2", "--data", "flash_attn_memory_fraction=0.01"),
    )
    assert result.returncode != 0 and not result.executed, result.describe()
    assert "not even one flash-attn compile job fits" in result.stderr
    assert {h.address: venv_versions(host_pool, h) for h in hosts} == before


def test_failed_build_shows_the_log_tail_and_keeps_the_old_build(host_pool, hosts, inventory):
    result = apply(inventory, options=("--data", "flash_attn_version=2.7.4"))
    assert result.returncode != 0, result.describe()
    assert "flash-attn 2.7.4 build failed after" in result.stderr
    assert "log: /var/log/pyinfra-sglang/flash-attn-2.7.4-build.log" in result.stderr
    assert "error: nvcc died with signal 9 (test double)" in result.stderr
    for h in hosts:
        assert venv_versions(host_pool, h)["flash_attn"] == "2.8.3"
        log = host_pool.run(h, "cat /var/log/pyinfra-sglang/flash-attn-2.7.4-build.log").stdout
        assert "compiling kernel 30 of 30" in log


# The private index's credentials; the password is what must never show on a command line.
INDEX_USER, INDEX_PASSWORD = "deploy", "pr1vate-Index-Pa55"
# Watches every process on the host until /root/sampler.stop appears: any command line that
# holds the password, and each pip/uv install it saw with the variables holding it.
SAMPLER = """
import json, os, time
needle = open("/root/needle").read()
me, leaks, installs = os.getpid(), set(), {}
while not os.path.exists("/root/sampler.stop"):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = " ".join(a.decode(errors="replace") for a in f.read().split(b"\\0") if a)
            if needle in line:
                leaks.add(line)
            if " install " in line and line not in installs:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = [e.decode(errors="replace") for e in f.read().split(b"\\0")]
                installs[line] = sorted(e.split("=", 1)[0] for e in env if needle in e)
        except OSError:
            continue
    time.sleep(0.002)
with open("/root/sampler.json", "w") as f:
    json.dump({"leaks": sorted(leaks), "installs": installs}, f)
"""


@pytest.fixture(scope="module")
def private_index(python_index):
    """The same package indexes, served as a private mirror: basic auth on every request."""
    with aptrepo.serve(python_index.root, credentials=(INDEX_USER, INDEX_PASSWORD)) as url:
        yield url.replace("http://", f"http://{INDEX_USER}:{INDEX_PASSWORD}@")


def test_index_credentials_reach_pip_and_uv_and_no_command_line_sampled_every_2ms(
    host_pool, hosts, inventory, private_index
):
    for h in hosts:
        # uv reinstalled by pip, new pins into a venv made afresh (an earlier test may have
        # left 0.5.22's, which is kept): every install of the Python roles runs.
        host_pool.run(h, "rm -rf /opt/sglang/uv/lib/python3*/site-packages/uv-*.dist-info")
        host_pool.run(h, f"rm -rf {VENV_0_5_22}")
        host_pool.run(h, f"printf %s {INDEX_PASSWORD} > /root/needle; rm -f /root/sampler.*")
        host_pool.run(
            h,
            "systemd-run --unit=cmdline-sampler --collect /usr/bin/python3 -c "
            f"{shlex.quote(SAMPLER)}",
        )
    try:
        result = apply(
            inventory,
            options=(
                "--data",
                f"pypi_index_url={private_index}/pypi/simple",
                "--data",
                f"torch_index_url={private_index}/torch/simple",
                "--data",
                "sglang_version=0.5.22",
                "--data",
                "flash_attn_version=2.8.2",
            ),
        )
        for h in hosts:
            host_pool.run(
                h, "touch /root/sampler.stop; while [ ! -s /root/sampler.json ]; do sleep 0.1; done"
            )
        assert result.returncode == 0 and not result.errors(), result.describe()
        assert INDEX_PASSWORD not in result.stdout + result.stderr
        for h in hosts:
            assert "Python environment | Install uv 0.13.9" in result.changed(h.address)
            versions = venv_versions(host_pool, h, VENV_0_5_22)
            assert (versions["sglang"], versions["flash_attn"]) == ("0.5.22", "2.8.2")
            seen = json.loads(host_pool.run(h, "cat /root/sampler.json").stdout)
            assert seen["leaks"] == []
            installs = seen["installs"]
            # pip read the index from PIP_INDEX_URL, uv from UV_INDEX_URL: torch's builds
            # and SGLang each from one index.
            assert any(
                "/opt/sglang/uv/bin/pip install" in line and keys == ["PIP_INDEX_URL"]
                for line, keys in installs.items()
            ), installs
            for pin in ("torch==2.14.1", "sglang==0.5.22"):
                assert any(
                    line.startswith("/opt/sglang/uv/bin/uv pip install")
                    and pin in line
                    and keys == ["UV_INDEX_URL"]
                    for line, keys in installs.items()
                ), (pin, installs)
            # flash-attn's wheel: built and installed by pip in the venv, from PIP_INDEX_URL.
            assert any(
                line.startswith(f"{VENV_0_5_22}/bin/python -m pip install")
                and "flash_attn-2.8.2" in line
                and keys == ["PIP_INDEX_URL"]
                for line, keys in installs.items()
            ), installs
            # The files the shell read them from are gone; their folder is root's alone.
            listing = host_pool.run(h, f"stat -c %a {CREDENTIALS_DIR}; ls -A {CREDENTIALS_DIR}")
            assert listing.stdout.split() == ["700"]
    finally:
        for h in hosts:
            host_pool.run(h, "systemctl stop cmdline-sampler; rm -f /root/needle", check=False)
        back = apply(inventory)
        assert back.returncode == 0 and not back.errors(), back.describe()
