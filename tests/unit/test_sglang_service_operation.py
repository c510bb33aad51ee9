"""The SGLang service operation from fact inputs: what it renders for the GPUs found, when it
is a no-op, and that secrets stay in root-only files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pyinfra.api.exceptions import OperationError
from pyinfra.facts.systemd import SystemdStatus

from checks.facts import (
    FileDigests,
    HttpStatus,
    IommuState,
    NvidiaGpus,
    NvidiaP2P,
    NvidiaTopology,
    PcieAcs,
    Virtualization,
)
from pyinfra_sglang.inventory import HostConfig
from pyinfra_sglang.parsers.nvidia_smi import GPU_QUERY_FIELDS
from pyinfra_sglang.serving.placement import GpuFitError, NodePosition
from pyinfra_sglang.serving.render import RenderError
from pyinfra_sglang.serving.service_files import read_secrets, service_files
from roles.sglang_service import service_plan, sglang_service
from tests.unit.captures import captured_lines
from tests.unit.ophelper import OP_CASE_FIELDS, op_case, run_operation

QUERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
H200X2 = NvidiaGpus().process(captured_lines("h200x2-nvlink-vm", QUERY))
RTX_X8 = NvidiaGpus().process(captured_lines("rtxpro6000x8-pcie-from-smiq", QUERY))
# topo -m of the same machines: NV18 between the H200s; PIX, NODE and SYS on the dual-socket
# RTX PRO 6000 box (ASUS ESC8000A-E13P, tests/fixtures/gpu/public).
TOPO_H200X2 = NvidiaTopology().process(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m"))
TOPO_RTX_X8 = NvidiaTopology().process(
    captured_lines("rtxpro6000x8-pcie-from-smiq", "nvidia-smi topo -m")
)
PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "public"
FACTS = Path(__file__).resolve().parents[1] / "fixtures" / "facts"
# What the H200 VM allows for peer traffic, as the role reads it (checks/peer_path.py):
# NVML's P2P matrix and IOMMU of the same machine; a VM with no lspci (ACS not read).
PEER_H200X2 = {
    NvidiaP2P: NvidiaP2P().process(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -p2p r")),
    PcieAcs: PcieAcs().process(["### lspci no"]),
    IommuState: IommuState().process((FACTS / "iommu_h200_vm.txt").read_text().splitlines()),
    Virtualization: Virtualization().process(["none", "kvm"]),
}


def public_topology(name: str) -> dict:
    """A posted topo -m without its source line (tests/fixtures/gpu/public/README.md)."""
    lines = (PUBLIC / name).read_text().splitlines()
    return NvidiaTopology().process([line for line in lines if not line.startswith("# source")])


def render_for(gpus, config: HostConfig, node: NodePosition | None = None, topology=None):
    if node is None:
        node = NodePosition()
    secrets = read_secrets(config, "gpu-host")
    return service_files(config, "gpu-host", gpus, node, secrets, topology)


def unit_of(service):
    return next(f for f in service.files if f.path.endswith("sglang.service")).content


def test_tp_follows_the_gpus_found_and_secrets_stay_out_of_the_unit(tmp_path: Path):
    key = tmp_path / "api-key"
    key.write_text("sk-test-SECRET\n")
    config = HostConfig(
        sglang_model_profile="dense-bf16", sglang_host="0.0.0.0", sglang_api_key_file=key
    )
    service = render_for(H200X2, config)
    unit = unit_of(service)
    assert "--tp-size 2" in unit and "--config /etc/sglang/sglang.yaml" in unit
    assert "SECRET" not in unit and "--api-key" not in unit
    by_path = {f.path: f for f in service.files}
    assert 'api-key: "sk-test-SECRET"' in by_path["/etc/sglang/sglang.yaml"].content
    assert by_path["/etc/sglang/sglang.yaml"].mode == "600"
    assert by_path["/etc/sglang/sglang.env"].mode == "600"
    assert "NCCL_P2P_LEVEL" not in by_path["/etc/sglang/sglang.env"].content  # NVLinked H200s
    assert service.health_url == "http://127.0.0.1:30000/health"


def env_of(service) -> dict[str, str]:
    text = next(f for f in service.files if f.path.endswith("sglang.env")).content
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")


def test_eight_pcie_blackwell_gpus_serve_glm5_at_tp8_with_nccl_hints():
    config = HostConfig(sglang_model_profile="glm-5-nvfp4", sglang_version="0.5.23")
    service = render_for(RTX_X8, config, topology=TOPO_RTX_X8)
    unit = unit_of(service)
    assert "--tp-size 8" in unit and "--dsa-prefill-backend flashinfer_sparse_mla" in unit
    assert "--kv-cache-dtype fp8_e4m3" in unit and "trtllm" not in unit
    env = env_of(service)
    # The box is dual-socket: GPU pairs across sockets are SYS, so P2P must reach SYS.
    assert (env["NCCL_P2P_LEVEL"], env["NCCL_IB_DISABLE"]) == ("SYS", "1")


@pytest.mark.parametrize(
    ("topology", "level"),
    [
        ("topo_8x_rtxpro6000_wrx90_2switch_pix_node_trimmed.txt", "PHB"),
        ("topo_8x_rtxpro6000_wrx90_3switch_pix_pxb_node_trimmed.txt", "PHB"),
        ("topo_8x_rtxpro6000_server_asus_pix_node_sys_ansi.txt", "SYS"),
    ],
)
def test_nccl_p2p_level_follows_the_widest_path_of_posted_topologies(topology, level):
    # One socket (PIX, PXB, NODE: one NUMA node) -> PHB; two sockets (SYS) -> SYS.
    config = HostConfig(sglang_model_profile="glm-5-nvfp4-dense")
    service = render_for(RTX_X8, config, topology=public_topology(topology))
    assert env_of(service)["NCCL_P2P_LEVEL"] == level


def test_a_host_overrides_the_nccl_hints_and_adds_its_own_variables():
    config = HostConfig(
        sglang_model_profile="glm-5-nvfp4-dense",
        sglang_env={"NCCL_P2P_LEVEL": "PHB", "NCCL_DEBUG": "WARN"},
    )
    env = env_of(render_for(RTX_X8, config, topology=TOPO_RTX_X8))
    assert (env["NCCL_P2P_LEVEL"], env["NCCL_DEBUG"]) == ("PHB", "WARN")
    # The dense profile's own sm_120 variable is there too.
    assert env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"


def test_a_host_cannot_set_what_the_renderer_sets():
    config = HostConfig(sglang_model_profile="dense-bf16", sglang_env={"HF_HUB_OFFLINE": "0"})
    with pytest.raises(RenderError, match="HF_HUB_OFFLINE are set by pyinfra-sglang") as error:
        render_for(H200X2, config, topology=TOPO_H200X2)
    assert error.value.field == "sglang_env"


def test_the_server_gets_the_profiles_pinned_commit_unless_the_inventory_names_one():
    def revision(**fields):
        config = HostConfig(sglang_model_profile="glm-5-nvfp4-dense", **fields)
        argv = unit_of(render_for(RTX_X8, config, topology=TOPO_RTX_X8)).split()
        return argv[argv.index("--revision") + 1] if "--revision" in argv else None

    assert revision() == "dc54ff55a7e9e71b85db953d8bc22eca894b44c6"
    assert revision(sglang_model_revision="d" * 40) == "d" * 40
    # Another model (its size given), no pin of its own: the model role records the commit
    # main stands for in the cache's refs/main, which the offline server resolves.
    size = {"weights_gb": 460, "num_layers": 78, "kv_bytes_per_token": {"auto": 61464}}
    assert revision(sglang_profile_overrides={"model": "o/m", **size}) is None


def test_nvlinked_gpus_get_no_pcie_hints_from_their_topology():
    env = env_of(
        render_for(H200X2, HostConfig(sglang_model_profile="dense-bf16"), None, TOPO_H200X2)
    )
    assert not [name for name in env if name.startswith("NCCL_")]


def test_glm5_sparse_on_sm120_before_0_5_17_is_refused_naming_the_dense_profile():
    config = HostConfig(sglang_model_profile="glm-5-nvfp4", sglang_version="0.5.16")
    with pytest.raises(Exception, match="needs SGLang 0.5.17 or later") as error:
        render_for(RTX_X8, config, topology=TOPO_RTX_X8)
    assert "use profile glm-5-nvfp4-dense" in str(error.value)
    # The dense profile runs there on that release.
    dense = HostConfig(sglang_model_profile="glm-5-nvfp4-dense", sglang_version="0.5.16")
    assert "--attention-backend flashinfer" in unit_of(render_for(RTX_X8, dense, None, TOPO_RTX_X8))


def test_a_backend_the_kernels_reject_is_refused_even_when_the_inventory_asks():
    # The write-up's trtllm on SM120: FlashInfer's trtllm-gen runner takes SM100/103/107 only.
    config = HostConfig(
        sglang_model_profile="glm-5-nvfp4",
        sglang_profile_overrides={
            "sparse_attention_prefill_backend": "trtllm",
            "sparse_attention_decode_backend": "trtllm",
        },
    )
    with pytest.raises(GpuFitError) as error:
        render_for(RTX_X8, config, topology=TOPO_RTX_X8)
    message = str(error.value)
    assert "cannot run on sm_120 GPUs with SGLang 0.5.23" in message
    assert "sparse_attention_decode_backend 'trtllm' has no kernels for sm_120" in message
    assert "fmhaRunner.cuh" in message and "glm-5-nvfp4-dense" in message


def test_two_gpus_cannot_hold_glm5():
    config = HostConfig(sglang_model_profile="glm-5-nvfp4-dense")
    with pytest.raises(Exception, match="does not fit 2 x"):
        render_for(RTX_X8[:2], config)


def test_no_gpus_says_reboot():
    with pytest.raises(OperationError, match="reboot into the installed driver"):
        render_for([], HostConfig(sglang_model_profile="dense-bf16"))


def digests_of(service):
    return {f.path: hashlib.sha256(f.content.encode()).hexdigest() for f in service.files}


DENSE = HostConfig(sglang_model_profile="dense-bf16")
H200X8 = [dict(g, name="NVIDIA H200") for g in (H200X2 * 4)]
ON_HOST = digests_of(
    render_for(H200X2, DENSE, topology=TOPO_H200X2)
)  # the host has the files for its 2 H200s


def apply_with_rollback(gpus, keep_previous: bool, restart=("sglang.service",)) -> str:
    """The guarded apply of the files rendered for ``gpus``, in its string form."""
    service = render_for(gpus, DENSE, topology=TOPO_H200X2 if gpus is H200X2 else {})
    plan = service_plan(service, keep_previous=keep_previous, restart=restart)
    return f"FunctionCommand(apply_with_rollback, ({plan!r},), {{}})"


@pytest.mark.parametrize(
    OP_CASE_FIELDS,
    [
        op_case(
            sglang_service,
            "same-files-running-and-healthy-is-a-noop",
            {
                NvidiaGpus: H200X2,
                NvidiaTopology: TOPO_H200X2,
                **PEER_H200X2,
                FileDigests: ON_HOST,
                SystemdStatus: {"sglang.service": True},
                HttpStatus: 200,
            },
            {"config": DENSE},
            noops=["sglang.service runs the rendered configuration, healthy"],
        ),
        # Before: an active unit with unchanged files was "no change" whatever /health said
        # (a start still loading, or wedged). Now it is restarted under the health wait.
        op_case(
            sglang_service,
            "same-files-running-but-unhealthy-is-restarted-under-the-wait",
            {
                NvidiaGpus: H200X2,
                NvidiaTopology: TOPO_H200X2,
                **PEER_H200X2,
                FileDigests: ON_HOST,
                SystemdStatus: {"sglang.service": True},
                HttpStatus: 503,
            },
            {"config": DENSE},
            commands=[apply_with_rollback(H200X2, keep_previous=True)],
        ),
        # A GPU upgrade (2 -> 8 GPUs) changes the unit: one guarded apply, keeping the old one.
        op_case(
            sglang_service,
            "gpu-upgrade-is-one-guarded-apply-keeping-the-old-files",
            {
                NvidiaGpus: H200X8,
                NvidiaTopology: {},  # no 8x H200 capture: the spec table says NVLink
                **PEER_H200X2,
                FileDigests: ON_HOST,
                SystemdStatus: {"sglang.service": True},
            },
            {"config": DENSE},
            commands=[apply_with_rollback(H200X8, keep_previous=True)],
        ),
        # Unchanged files but a stopped service: started again, nothing to keep.
        op_case(
            sglang_service,
            "same-files-but-stopped-is-applied-keeping-nothing",
            {
                NvidiaGpus: H200X2,
                NvidiaTopology: TOPO_H200X2,
                **PEER_H200X2,
                FileDigests: ON_HOST,
                SystemdStatus: {"sglang.service": False},
            },
            {"config": DENSE},
            commands=[apply_with_rollback(H200X2, keep_previous=False)],
        ),
    ],
)
def test_operation_yields_exactly(op, facts, args, commands, noops, executing):
    assert run_operation(op, facts, executing, **args) == (commands, noops)


def test_multinode_ranks_follow_the_group_order(tmp_path, monkeypatch):
    from pyinfra.context import ctx_host

    from checks.host_context import host_position
    from pyinfra_sglang.inventory import load_inventory_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.py").write_text(
        "pair = [('node-a', {'sglang_multinode_group': 'pair'}),"
        " ('node-b', {'sglang_multinode_group': 'pair'})]\n"
    )
    inventory = load_inventory_file("inv.py")
    config = HostConfig(sglang_multinode_group="pair", sglang_dist_init_port=5000)
    positions = []
    for name in ("node-a", "node-b"):
        with ctx_host.use(inventory.get_host(name)):
            positions.append(host_position(config, inventory.get_host(name)))
    assert positions == [NodePosition(2, 0, "node-a:5000"), NodePosition(2, 1, "node-a:5000")]


def test_router_unit_is_rendered_for_worker_urls():
    config = HostConfig(
        sglang_model_profile="dense-bf16",
        sglang_router_worker_urls=["http://10.0.0.1:30000", "http://10.0.0.2:30000"],
    )
    service = render_for(H200X2, config)
    router = next(f for f in service.files if f.path.endswith("sglang-router.service"))
    # SGLang 0.5.23 (the default) pairs with smg (data/python.toml [router]).
    assert "/bin/smg launch --worker-urls" in router.content
    assert "http://10.0.0.1:30000" in router.content and "http://10.0.0.2:30000" in router.content
    older = render_for(H200X2, config.model_copy(update={"sglang_version": "0.5.8"}))
    router = next(f for f in older.files if f.path.endswith("sglang-router.service"))
    assert "-m sglang_router.launch_router" in router.content


ROUTED = {"sglang_router_worker_urls": ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]}


def router_files(service):
    return {f.path: f for f in service.files if "router" in f.path}


def test_the_router_binds_loopback_with_metrics_on_loopback_by_default():
    config = HostConfig(sglang_model_profile="dense-bf16", **ROUTED)
    service = render_for(H200X2, config)
    [unit] = router_files(service).values()
    words = unit.content.split("ExecStart=", 1)[1]
    assert "--host 127.0.0.1" in words and "--port 30080" in words
    assert "--prometheus-host 127.0.0.1" in words and "--prometheus-port 29000" in words
    assert service.router_health_url == "http://127.0.0.1:30080/health"
    # Without a key there is no router env file: a stale one is removed.
    assert service.stale == ("/etc/sglang/sglang-router.env",)


def test_a_public_server_keeps_its_router_on_loopback(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-server\n")
    config = HostConfig(
        sglang_model_profile="dense-bf16", sglang_host="0.0.0.0", sglang_api_key_file=key, **ROUTED
    )
    [unit] = router_files(render_for(H200X2, config)).values()
    assert "--host 127.0.0.1" in unit.content and "--host 0.0.0.0" not in unit.content


def test_a_public_router_gets_its_key_through_a_0600_env_file(tmp_path):
    key = tmp_path / "router-key"
    key.write_text("sk-ROUTER-SECRET\n")
    key.chmod(0o600)
    config = HostConfig(
        sglang_model_profile="dense-bf16",
        sglang_router_host="0.0.0.0",
        sglang_router_api_key_file=key,
        sglang_router_metrics_port=29100,
        **ROUTED,
    )
    service = render_for(H200X2, config)
    files = router_files(service)
    unit = files["/etc/systemd/system/sglang-router.service"]
    env = files["/etc/sglang/sglang-router.env"]
    assert env.mode == "600" and "SGLANG_ROUTER_API_KEY=sk-ROUTER-SECRET" in env.content
    assert "SECRET" not in unit.content
    # Only the launcher names --api-key: it adds the key in-process, off the command line.
    assert (
        unit.content.count("--api-key") == 1
        and "os.environ.pop('SGLANG_ROUTER_API_KEY')" in unit.content
    )
    assert "EnvironmentFile=/etc/sglang/sglang-router.env" in unit.content
    assert "--host 0.0.0.0" in unit.content
    # Metrics stay on loopback even when the router itself is public.
    assert (
        "--prometheus-host 127.0.0.1" in unit.content and "--prometheus-port 29100" in unit.content
    )
    assert service.router_health_url == "http://127.0.0.1:30080/health"
    assert service.stale == ()
    # The audit and the role compare digests of all of them: the env file is one of the files.
    assert "/etc/sglang/sglang-router.env" in digests_of(service)


def test_without_a_router_both_router_files_are_stale():
    service = render_for(H200X2, DENSE)
    assert service.stale == (
        "/etc/systemd/system/sglang-router.service",
        "/etc/sglang/sglang-router.env",
    )
    assert service.router_health_url is None
