"""Read one command's output from a real capture file (blocks of `### cmd` ... `### rc=N`)."""

from pathlib import Path

from tests.hosts.nvidia_smi_replay import find_block

GPU_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def captured_lines(capture: str, command: str) -> list[str]:
    found = find_block((GPU_FIXTURES / capture / "smi.txt").read_bytes(), command)
    assert found is not None, f"{command!r} is not in {capture}/smi.txt"
    return found[0].decode().splitlines()
