"""The install order's plan: which stack a release takes, which CUDA releases it installs
for, and what each step asks of which index."""

from __future__ import annotations

import pytest

from pyinfra_sglang import data
from pyinfra_sglang.python_env.python_stack import (
    install_plan,
    stack_for,
    stack_problem,
    version_matches,
)
from pyinfra_sglang.versions import parse_version

PYPI = "https://pypi.org/simple"


def test_every_stack_row_is_a_release_in_order():
    releases = [parse_version(row.sglang) for row in data.python().sglang.stacks]
    assert releases == sorted(set(releases))


def test_a_release_between_rows_takes_the_older_row_and_an_unread_one_the_nearest():
    assert stack_for("0.5.9.post1").sglang == "0.5.9"
    assert stack_for("0.5.99").sglang == data.python().sglang.stacks[-1].sglang
    assert stack_for("0.5.4").sglang == data.python().sglang.stacks[0].sglang


@pytest.mark.parametrize(
    ("installed", "pinned", "matches"),
    [
        ("2.14.1+cu130", "2.14.1", True),
        ("2.14.1", "2.14.1", True),
        ("2.14.10", "2.14.1", False),
        ("0.3.21", "0.3.21+cu130", False),
        ("0.3.21+cu130", "0.3.21+cu130", True),
        ("0.3.21+cu129", "0.3.21+cu130", False),
    ],
)
def test_a_pin_without_a_local_label_takes_any_build(installed, pinned, matches):
    assert version_matches(installed, pinned) is matches


def test_sglang_never_comes_from_the_torch_index_nor_torch_from_pypi():
    plan = install_plan("0.5.23", "13.1", PYPI)
    torch_step, sglang_step = plan.steps
    assert torch_step.index_url == "https://download.pytorch.org/whl/cu130"
    assert set(torch_step.requirements) == {"torch", "torchvision", "torchaudio"}
    assert torch_step.no_deps
    assert sglang_step.index_url == PYPI
    assert sglang_step.requirements == {"sglang": "0.5.23", "sglang-kernel": "0.4.10"}
    assert not sglang_step.no_deps


def test_the_inventory_indexes_replace_pytorchs_and_sglangs():
    plan = install_plan("0.5.9", "13.0", PYPI, "https://m/torch", "https://m/kernel")
    assert [step.index_url for step in plan.steps] == ["https://m/torch", "https://m/kernel", PYPI]
    assert plan.steps[1].requirements == {"sgl-kernel": "0.3.21+cu130"}


@pytest.mark.parametrize(
    ("sglang", "cuda", "problem"),
    [
        (
            "0.5.23",
            "12.9",
            "SGLang 0.5.23 has no CUDA 12 install on PyPI: its sglang-kernel 0.4.10 is a CUDA 13 "
            "build and it requires cuda-python>=13.0. Set cuda_version to 13.0 or 13.1, or "
            "sglang_version to 0.5.10 or older",
        ),
        (
            "0.5.11",
            "12.8",
            "SGLang 0.5.11 has no CUDA 12 install on PyPI: its sglang-kernel 0.4.2 is a CUDA 13 "
            "build and it requires cuda-python>=13.0. Set cuda_version to 13.0 or 13.1, or "
            "sglang_version to 0.5.10 or older",
        ),
        (
            "0.5.5",
            "13.0",
            "SGLang 0.5.5 pins torch 2.8.0, which PyTorch did not build for cu130 (its first "
            "cu130 build is torch 2.9.0). Set sglang_version to 0.5.6 or newer, or an older "
            "cuda_version",
        ),
        ("0.5.5", "12.8", None),
        ("0.5.10", "12.9", None),
        ("0.5.10", "13.1", None),
        ("0.5.17", "13.0", None),
    ],
)
def test_what_installs_for_which_cuda(sglang, cuda, problem):
    assert stack_problem(sglang, cuda) == problem
    if problem:
        with pytest.raises(ValueError, match="Set "):
            install_plan(sglang, cuda, PYPI)


def test_the_inventory_refuses_a_release_without_an_install_for_its_cuda():
    from pyinfra_sglang.inventory import HostConfig

    with pytest.raises(ValueError, match="SGLang 0.5.23 has no CUDA 12 install on PyPI"):
        HostConfig(sglang_version="0.5.23", cuda_version="12.9", nvidia_driver_branch=590)
    assert HostConfig(sglang_version="0.5.9", cuda_version="13.1").sglang_version == "0.5.9"
