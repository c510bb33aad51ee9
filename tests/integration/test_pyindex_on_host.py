"""A real Debian 12 test host installs SGLang's stack from the local Python index, as the
product will: uv from "PyPI" with pip, a uv venv on the host's Python 3.11, sglang with torch
from the torch index, the build tools, then flash-attn built from its sdist without build
isolation; a flash-attn build that dies shows its log's tail; and the installed sglang and
sglang-router stand-ins serve."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

pytestmark = pytest.mark.hosts

APT_GET = "DEBIAN_FRONTEND=noninteractive apt-get -y -q"
UV = "/opt/sglang/uv/bin/uv"
PYTHON = "/opt/sglang/venv/bin/python"
# uv may use only the indexes it is given: no interpreter downloads, no cache.
UV_ENV = "UV_PYTHON_DOWNLOADS=never UV_NO_CACHE=1"
BUILD_ENV = {
    "MAX_JOBS": "3",
    "NVCC_THREADS": "2",
    "FLASH_ATTN_CUDA_ARCHS": "90",
    "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
}
NVCC_DIED = "error: nvcc died with signal 9 (test double)"
SERVER_PORT, ROUTER_PORT = 31000, 31080  # on the host's own address


@pytest.fixture
def host(host_pool):
    [test_host] = host_pool.boot(1)
    yield test_host
    host_pool.stop(test_host)


def test_host_installs_sglang_stack_from_the_local_index(host_pool, host, python_index):
    def ok(command: str) -> str:
        result = host_pool.run(host, command, check=False)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    pypi, torch = python_index.pypi_url, python_index.torch_url
    uv_pip = f"{UV_ENV} {UV} pip install --python {PYTHON} --index-url {pypi}"
    build_env = " ".join(f"{name}={value}" for name, value in BUILD_ENV.items())
    flash_attn = f"{build_env} {uv_pip} --no-build-isolation flash-attn"

    ok(f"{APT_GET} update && {APT_GET} install python3-venv")  # Debian's venv needs it
    # The product's steps 1-5.
    ok("python3 -m venv /opt/sglang/uv")
    ok(f"/opt/sglang/uv/bin/pip install --index-url {pypi} uv==0.13.9")
    ok(f"{UV_ENV} {UV} venv --python 3.11 /opt/sglang/venv")
    # torch's CUDA builds from the torch index alone, then SGLang from PyPI alone (the torch
    # index carries an old sglang, as PyTorch's does: docs/packages.md, "The install order").
    torch_builds = "torch==2.14.1 torchvision==0.29.1 torchaudio==2.11.0"
    ok(f"{UV_ENV} {UV} pip install --python {PYTHON} --no-deps --index-url {torch} {torch_builds}")
    ok(f"{uv_pip} sglang==0.5.23")
    ok(f"{uv_pip} packaging psutil ninja setuptools wheel")
    ok(f"{flash_attn}==2.8.3")

    versions = "print(sglang.__version__, torch.__version__, torch.version.cuda)"
    assert ok(f"{PYTHON} -c 'import sglang, torch; {versions}'") == "0.5.23 2.14.1+cu130 13.0\n"
    read_build_env = (
        "import flash_attn, pathlib; "
        'print(pathlib.Path(flash_attn.__file__).with_name("build_env.json").read_text())'
    )
    recorded = json.loads(ok(f"{PYTHON} -c '{read_build_env}'"))
    assert recorded == {**BUILD_ENV, "CUDA_HOME": None, "torch_version": "2.14.1+cu130"}

    # A build that dies: uv fails and its output ends with the build log's last line
    # (before uv's own hints).
    failed = host_pool.run(host, f"{flash_attn}==2.7.4", check=False)
    output = failed.stdout + failed.stderr
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    while lines and lines[-1].startswith("hint:"):
        lines.pop()
    assert failed.returncode != 0, output
    assert lines[-2:] == ["compiling kernel 30 of 30 (test stand-in)", NVCC_DIED], output
    installed = ok(f"{PYTHON} -c 'import flash_attn; print(flash_attn.__version__)'")
    assert installed == "2.8.3\n"  # the failed build left the installed one alone

    # The installed stand-ins serve on the host's Python: sglang and the router in front of it,
    # as transient systemd services (the host's own 127.0.0.x address, reached from here).
    ok(f"{uv_pip} sglang-router")
    server = f"http://{host.address}:{SERVER_PORT}"
    ok(
        f"systemd-run --unit=standin-sglang --setenv=SGLANG_STANDIN_WARMUP_S=0.5 "
        f"--setenv=HF_TOKEN=hf_secret {PYTHON} -m sglang.launch_server --model-path org/model "
        f"--served-model-name m --host {host.address} --port {SERVER_PORT}"
    )
    ok(
        f"systemd-run --unit=standin-router {PYTHON} -m sglang_router.launch_router "
        f"--worker-urls {server} --policy cache_aware --host {host.address} "
        f"--port {ROUTER_PORT}"
    )
    router = f"http://{host.address}:{ROUTER_PORT}"
    assert wait_for(f"{server}/health") and wait_for(f"{router}/readiness")
    question = {"messages": [{"role": "user", "content": "The capital of France?"}]}
    answer = json.loads(fetch(f"{router}/v1/chat/completions", question))
    assert answer["choices"][0]["message"]["content"] == "The capital of France is Paris."
    ok("systemctl stop standin-router standin-sglang")
    record = json.loads(ok(f"cat /run/sglang-standin/{SERVER_PORT}.json"))
    assert (record["state"], record["exit_code"], record["hf_token_set"]) == ("stopped", 0, True)
    assert record["executable"] == PYTHON
    assert "hf_secret" not in json.dumps(record)
    assert json.loads(ok(f"cat /run/sglang-standin/router-{ROUTER_PORT}.json"))["state"] == (
        "stopped"
    )


def fetch(url: str, body: dict | None = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=10) as r:
        return r.read()


def wait_for(url: str, timeout: float = 30) -> bool:
    """True once GET url answers 200, False after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fetch(url)
            return True
        except OSError:  # refused, or an HTTP error status (503 while warming up)
            time.sleep(0.2)
    return False
