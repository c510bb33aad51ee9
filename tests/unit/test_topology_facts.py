"""Topology parsers (`nvidia-smi topo -m`, `topo -p2p`) on real captures and public pastes."""

from pathlib import Path

from checks.facts import NvidiaP2P, NvidiaTopology
from pyinfra_sglang.parsers.topo import (
    parse_topo_matrix,
    parse_topo_p2p,
    topology_has_nvlink,
)
from tests.unit.captures import captured_lines

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "public"
GPUS8 = [f"GPU{i}" for i in range(8)]


def public_lines(name: str) -> list[str]:
    lines = (PUBLIC / name).read_text().splitlines()
    assert lines[0].startswith("# source: ")
    return lines[1:]


def assert_square_8(matrix):
    assert list(matrix) == GPUS8
    for gpu, cells in matrix.items():
        assert list(cells) == GPUS8
        assert cells[gpu] == "X"


def test_h200_topology_is_nv18():
    matrix = NvidiaTopology().process(captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m"))
    assert matrix == {
        "GPU0": {"GPU0": "X", "GPU1": "NV18"},
        "GPU1": {"GPU0": "NV18", "GPU1": "X"},
    }
    assert topology_has_nvlink(matrix)


def test_h200_p2p_read_and_nvlink_are_ok():
    expected = {"GPU0": {"GPU0": "X", "GPU1": "OK"}, "GPU1": {"GPU0": "OK", "GPU1": "X"}}
    for mode in ("r", "n"):
        output = captured_lines("h200x2-nvlink-vm", f"nvidia-smi topo -p2p {mode}")
        assert NvidiaP2P().process(output) == expected
        assert parse_topo_p2p(output) == expected


def test_asus_server_pix_node_sys_with_ansi_and_affinity():
    matrix = parse_topo_matrix(public_lines("topo_8x_rtxpro6000_server_asus_pix_node_sys_ansi.txt"))
    assert_square_8(matrix)
    assert matrix["GPU0"]["GPU1"] == "PIX"
    assert matrix["GPU2"]["GPU3"] == "PIX"
    assert matrix["GPU6"]["GPU7"] == "PIX"
    assert matrix["GPU0"]["GPU2"] == "NODE"
    assert matrix["GPU5"]["GPU7"] == "NODE"
    assert matrix["GPU0"]["GPU4"] == "SYS"
    assert matrix["GPU7"]["GPU3"] == "SYS"
    assert not topology_has_nvlink(matrix)


def test_wrx90_two_switches_pix_node():
    matrix = parse_topo_matrix(
        public_lines("topo_8x_rtxpro6000_wrx90_2switch_pix_node_trimmed.txt")
    )
    assert_square_8(matrix)
    assert matrix["GPU0"]["GPU3"] == "PIX"
    assert matrix["GPU4"]["GPU7"] == "PIX"
    assert matrix["GPU3"]["GPU4"] == "NODE"
    assert matrix["GPU7"]["GPU0"] == "NODE"
    assert not topology_has_nvlink(matrix)


def test_wrx90_three_switches_pix_pxb_node():
    matrix = parse_topo_matrix(
        public_lines("topo_8x_rtxpro6000_wrx90_3switch_pix_pxb_node_trimmed.txt")
    )
    assert_square_8(matrix)
    assert matrix["GPU0"]["GPU1"] == "PIX"
    assert matrix["GPU2"]["GPU3"] == "PIX"
    assert matrix["GPU0"]["GPU2"] == "PXB"
    assert matrix["GPU5"]["GPU6"] == "PXB"
    assert matrix["GPU1"]["GPU4"] == "NODE"
    assert not topology_has_nvlink(matrix)


def test_nic_rows_and_columns_are_dropped():
    # Layout of a host with NICs: NIC columns between the GPUs and the affinity columns,
    # NIC rows after the GPU rows, and a NIC legend.
    output = [
        "\t\x1b[4mGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m",
        "GPU0\t X \tNV18\tPXB\tSYS\t0-31\t0\t\tN/A",
        "GPU1\tNV18\t X \tSYS\tPXB\t32-63\t1\t\tN/A",
        "NIC0\tPXB\tSYS\t X \tSYS",
        "NIC1\tSYS\tPXB\tSYS\t X ",
        "",
        "NIC Legend:",
        "",
        "  NIC0: mlx5_0",
        "  NIC1: mlx5_1",
    ]
    matrix = parse_topo_matrix(output)
    assert matrix == {
        "GPU0": {"GPU0": "X", "GPU1": "NV18"},
        "GPU1": {"GPU0": "NV18", "GPU1": "X"},
    }


def test_without_nvidia_smi():
    assert NvidiaTopology.default() == {}
    assert NvidiaP2P.default() == {}
    assert NvidiaTopology().process([]) == {}
    assert NvidiaP2P().process([]) == {}
    # pyinfra runs the command only where nvidia-smi is (requires_command), else the default.
    assert NvidiaTopology().requires_command() == NvidiaP2P().requires_command() == "nvidia-smi"
    assert NvidiaTopology().command() == "nvidia-smi topo -m || true"
    assert NvidiaP2P().command("w") == "nvidia-smi topo -p2p w || true"
    assert "topo -p2p r " in NvidiaP2P().command()


def test_diagonal_x_is_not_nvlink():
    assert not topology_has_nvlink({"GPU0": {"GPU0": "X"}})
    assert not topology_has_nvlink({})
