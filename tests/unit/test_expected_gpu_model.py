"""expected_gpu_model: validation plans for the GPU the host has, not the largest of the
profile's architectures, and the deploy refuses a host whose GPUs are another model."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_host, ctx_state

from checks.facts import NvidiaGpus
from pyinfra_sglang.gpus import OtherGpuModelError, gpu_names, refuse_other_gpu_model
from pyinfra_sglang.inventory import (
    HostConfig,
    InventoryError,
    load_inventory_file,
    validate_host_data,
    validate_inventory,
)
from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS
from pyinfra_sglang.serving.profiles import load_profile
from pyinfra_sglang.serving.service_files import planned_gpus
from tests.unit.captures import captured_lines

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "inventories" / "example.py")
RTX_SERVER = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Where pyinfra runs: the API key file the example inventory names (0600)."""
    (tmp_path / "secrets").mkdir()
    key = tmp_path / "secrets" / "sglang-api-key"
    key.write_text("sk-example-0123\n")
    key.chmod(0o600)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def problems_of(override: dict) -> list:
    try:
        validate_inventory(load_inventory_file(EXAMPLE, override), warn=lambda _: None)
    except InventoryError as error:
        return error.problems
    return []


def test_the_example_names_its_gpu_model(site):
    [config] = validate_inventory(load_inventory_file(EXAMPLE), warn=lambda _: None).values()
    assert config.expected_gpu_model == RTX_SERVER


def test_the_example_with_sglang_0_5_16_on_4_gpus_is_refused_for_its_gpu(site):
    # Before: validation planned for a B200 (the largest GPU of sm_100 / sm_120), whose
    # trtllm backend 0.5.16 has and 4 x 180 GB hold the model: "ok", while render refused
    # both for the RTX PRO 6000 the host has.
    [problem] = problems_of({"sglang_version": "0.5.16", "expected_gpu_count": 4})
    assert (problem.host, problem.field) == ("gpu-pcie-01.example.internal", "sglang_version")
    assert "on sm_120 GPUs needs SGLang 0.5.17 or later" in problem.message
    assert f"GPUs planned: 4 x {RTX_SERVER}, expected_gpu_model" in problem.message
    text = str(problem)
    assert text.startswith("host gpu-pcie-01.example.internal: sglang_version = '0.5.16'")
    # With a release that runs there, 4 of them still cannot hold the model.
    [problem] = problems_of({"expected_gpu_count": 4})
    assert (problem.host, problem.field, problem.value) == (
        "gpu-pcie-01.example.internal",
        "expected_gpu_count",
        "4",
    )
    assert "does not fit 4 x 96 GB at tensor-parallel size 4" in problem.message
    assert RTX_SERVER in problem.message


def test_unset_the_largest_gpu_of_the_profiles_archs_is_assumed_and_said(site):
    # What is assumed when the field is unset: the refusal says so.
    [problem] = problems_of({"expected_gpu_model": None, "expected_gpu_count": 2})
    assert "2 x NVIDIA B200, unset expected_gpu_model: the largest" in problem.message
    assert problems_of({"expected_gpu_model": None, "sglang_version": "0.5.16"}) == []


def test_a_gpu_model_of_another_architecture_is_refused_on_that_field(site):
    [problem] = problems_of({"expected_gpu_model": "NVIDIA H200"})
    assert (problem.field, problem.value) == ("expected_gpu_model", "'NVIDIA H200'")
    assert "runs on sm_100, sm_120; these GPUs are sm_90" in problem.message


def test_only_the_tables_gpus_are_allowed_and_listed():
    config, [problem] = validate_host_data("gpu1", {"expected_gpu_model": "NVIDIA H300"})
    assert config is None and problem.field == "expected_gpu_model"
    assert "no spec for GPU 'NVIDIA H300'" in problem.message
    assert all(name in problem.allowed for name in gpu_names())
    _, [problem] = validate_host_data("gpu1", {"expected_gpu_model": "RTX PRO 6000"})
    assert "matches several GPUs" in problem.message
    # A spelling that stands for one GPU alone is kept as nvidia-smi names it.
    config, problems = validate_host_data("gpu1", {"expected_gpu_model": "rtx pro 6000 server"})
    assert problems == [] and config.expected_gpu_model == RTX_SERVER


def test_planned_gpus_are_the_expected_model():
    glm = load_profile("glm-5-nvfp4")
    planned = planned_gpus(HostConfig(expected_gpu_model=RTX_SERVER), glm)
    # The fewest that hold GLM-5 per GPU (memory_fit.py) at a size its 64 heads allow.
    assert (planned.count, planned.memory_gb, planned.arch, planned.pcie_only) == (
        8,
        96,
        "sm_120",
        True,
    )
    assert planned_gpus(HostConfig(), glm).arch == "sm_100"  # a B200, unset


def found_gpus(capture: str) -> list[dict]:
    query = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
    return NvidiaGpus().process(captured_lines(capture, query))


def test_gpus_of_another_model_are_refused_naming_host_field_and_gpus():
    h200s = found_gpus("h200x2-nvlink-vm")
    with pytest.raises(OtherGpuModelError) as refused:
        refuse_other_gpu_model("gpu-1", RTX_SERVER, h200s)
    assert str(refused.value).startswith(
        f"host gpu-1: expected_gpu_model = '{RTX_SERVER}', but nvidia-smi reports GPUs 0, 1 "
        "as NVIDIA H200:"
    )
    assert str(refused.value).endswith("Nothing was changed.")
    # The model found, none found (no driver yet), or the field unset: nothing to refuse.
    refuse_other_gpu_model("gpu-1", RTX_SERVER, found_gpus("rtxpro6000x8-pcie-from-smiq"))
    refuse_other_gpu_model("gpu-1", RTX_SERVER, [])
    refuse_other_gpu_model("gpu-1", None, h200s)


def test_the_driver_role_refuses_other_gpus_before_planning_any_change():
    """deploy/site.py's first role that reads the GPUs refuses at planning, before any
    operation is added (an unexpected fact read fails the test)."""
    from roles import nvidia_driver as role

    inventory = Inventory((["gpu-1"], {}))
    state = State(inventory=inventory, config=Config())
    host = inventory.get_host("gpu-1")
    h200s = found_gpus("h200x2-nvlink-vm")

    def get_fact(cls, *args, **kwargs):
        if cls is not NvidiaGpus:
            raise AssertionError(f"read {cls.__name__} after the GPUs were found wrong")
        return h200s

    config = HostConfig(expected_gpu_model=RTX_SERVER)
    with ctx_state.use(state), ctx_host.use(host):
        with (
            patch.object(host, "get_fact", side_effect=get_fact),
            patch.object(role, "host_config", return_value=config),
            patch.object(role, "host_platform"),
            pytest.raises(OtherGpuModelError, match="nvidia-smi reports GPUs 0, 1 as NVIDIA H200"),
        ):
            role.nvidia_driver()


def test_the_audit_reports_gpus_of_another_model():
    from pyinfra_sglang.audit.drift import findings_for_gpu_model
    from pyinfra_sglang.audit.judge import judge
    from pyinfra_sglang.audit.record import AuditExpectations
    from tests.unit.test_audit_judge import h200_facts

    h200s = found_gpus("h200x2-nvlink-vm")
    [finding] = findings_for_gpu_model(RTX_SERVER, h200s)
    assert (finding.level, finding.code) == ("fail", "gpu-model-mismatch")
    assert finding.message.startswith(
        f"Expected {RTX_SERVER} (expected_gpu_model), nvidia-smi sees NVIDIA H200."
    )
    assert finding.evidence == {"expected": RTX_SERVER, "found": ["NVIDIA H200"] * 2}
    assert findings_for_gpu_model("NVIDIA H200", h200s) == []
    assert findings_for_gpu_model(None, h200s) == []
    # Through the judge, from the inventory's field; a record made before it has none.
    expected = AuditExpectations.from_config(
        HostConfig(expected_gpu_model=RTX_SERVER), "sglang.service", node_rank=0
    )
    assert "gpu-model-mismatch" in {f.code for f in judge(expected, h200_facts())}
    unset = AuditExpectations.from_config(HostConfig(), "sglang.service", node_rank=0)
    assert "gpu-model-mismatch" not in {f.code for f in judge(unset, h200_facts())}
