"""Files holding several `nvidia-smi topo` matrices, as people paste them: `topo -m` and
`topo -p2p` together, with or without their command lines, indented by a pager, legends
rewrapped. Every variant is derived in the test from the real captures it names."""

from __future__ import annotations

import textwrap

import pytest

from pyinfra_sglang.parsers.topo import (
    TopoError,
    parse_topo_matrix,
    parse_topo_p2p,
    read_topo,
)
from tests.unit.captures import captured_lines
from tests.unit.test_topology_facts import public_lines

# Real outputs of the 2x H200 VM (h200x2-nvlink-vm/smi.txt).
TOPO = captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -m")
P2P_R = captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -p2p r")
P2P_N = captured_lines("h200x2-nvlink-vm", "nvidia-smi topo -p2p n")
NV18 = {"GPU0": {"GPU0": "X", "GPU1": "NV18"}, "GPU1": {"GPU0": "NV18", "GPU1": "X"}}
OK = {"GPU0": {"GPU0": "X", "GPU1": "OK"}, "GPU1": {"GPU0": "OK", "GPU1": "X"}}
# The ASUS 8x RTX PRO 6000 server's `topo -m` (public/, ANSI escapes, legend).
ASUS = public_lines("topo_8x_rtxpro6000_server_asus_pix_node_sys_ansi.txt")


def test_topo_then_p2p_pasted_together_gives_each_its_matrix():
    for pasted in (TOPO + P2P_R, P2P_R + TOPO):
        assert parse_topo_matrix(pasted) == NV18
        assert parse_topo_p2p(pasted) == OK


def test_command_lines_name_the_matrices_that_follow():
    # As a terminal shows them: the prompt line before each output (and smi.txt's own form).
    pasted = (
        ["$ nvidia-smi topo -p2p n", *P2P_N]
        + ["$ nvidia-smi topo -m", *TOPO]
        + ["### nvidia-smi topo -p2p r", *P2P_R]
    )
    found = read_topo(pasted)
    assert found.topology == NV18
    assert set(found.p2p_named) == {"n", "r"} and found.p2p("r") == OK
    assert found.matrices == 3


def test_only_other_p2p_modes_give_no_read_matrix():
    assert parse_topo_p2p(["nvidia-smi topo -p2p n", *P2P_N]) == {}
    assert parse_topo_p2p(["nvidia-smi topo -p2p n", *P2P_N], mode="n") == OK


def test_p2p_matrices_that_differ_without_command_lines_are_refused():
    # The H200's P2P read matrix, then the same cut to GPU0 alone (its header and first
    # row): two P2P matrices that differ, neither named by a command line.
    one_gpu = [P2P_R[0].replace("GPU1", ""), P2P_R[1]]
    found = read_topo(P2P_R + one_gpu + TOPO)
    assert found.topology == NV18
    with pytest.raises(TopoError, match="which is `-p2p r`"):
        found.p2p("r")


def test_pager_indentation_and_rewrapped_legends_read_the_same():
    indented = ["    " + line for line in ASUS + TOPO]
    assert parse_topo_matrix(indented) == NV18  # the last topology matrix
    assert parse_topo_matrix(["   " + line for line in ASUS]) == parse_topo_matrix(ASUS)
    # Legend lines rewrapped at 40 columns, as a narrow terminal or a mail client does.
    rewrapped = [
        part
        for line in ASUS + P2P_R
        for part in (textwrap.wrap(line, 40) if "=" in line else [line])
    ]
    assert len(rewrapped) > len(ASUS + P2P_R) + 5
    assert parse_topo_matrix(rewrapped) == parse_topo_matrix(ASUS)
    assert parse_topo_p2p(rewrapped) == OK


def test_a_matrix_row_without_its_header_is_not_read():
    assert read_topo(TOPO[2:] + P2P_R[2:]).matrices == 0
