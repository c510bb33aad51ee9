"""bench/first_deploy_roles.py's reading of pyinfra's --debug lines: each operation's time
runs to the next one's start, summed by its name's role prefix."""

from __future__ import annotations

from bench.first_deploy_roles import OUTSIDE, role_of, seconds_by_role


def test_an_operations_role_is_its_names_prefix():
    assert role_of("{'SGLang service | Render the unit'}") == "SGLang service"
    assert role_of("{'Create the transfer folder'}") == OUTSIDE


def test_seconds_run_from_one_operation_start_to_the_next_and_sum_by_role():
    lines = [
        (0.0, "--> Connecting to hosts\n"),
        (1.0, "--> Preparing operation files\n"),
        (4.0, "--> Beginning operation run\n"),
        (4.5, "Starting operation {'Base | Install packages'} on 127.0.0.2\n"),
        (10.5, "Starting operation {'Base | Write sysctl'} on 127.0.0.2\n"),
        (11.0, "Starting operation {'Python environment | Install uv'} on 127.0.0.2\n"),
        (30.0, "--> Results:\n"),
    ]
    seconds, operations, planning = seconds_by_role(lines)
    assert planning == 4.0
    assert seconds == {"Base": 6.5, "Python environment": 19.0}
    assert operations == {"Base": 2, "Python environment": 1}
