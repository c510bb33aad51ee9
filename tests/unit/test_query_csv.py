"""The --query-gpu CSV parser on real captures and variants derived from them in each test:
any subset and order of fields, with or without units, several samples, no header, long
streams read in bounded memory."""

from __future__ import annotations

import tracemalloc

import pytest

from pyinfra_sglang.parsers.nvidia_smi import (
    GPU_QUERY_FIELDS,
    GpuQueryError,
    parse_gpu_query_csv,
    read_gpu_query_csv,
)
from tests.unit.captures import captured_lines

QUERY = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv"
# The audit's query on the real 2x H200 VM (h200x2-nvlink-vm/smi.txt).
H200 = captured_lines("h200x2-nvlink-vm", QUERY)
# The same query derived from the real 8x RTX PRO 6000 `nvidia-smi -q`
# (rtxpro6000x8-pcie-from-smiq), and its copy with GPU 5 at x8 (rtxpro6000x8-pcie-x8-of-x16).
RTX = captured_lines("rtxpro6000x8-pcie-from-smiq", QUERY)
RTX_X8 = captured_lines("rtxpro6000x8-pcie-x8-of-x16", QUERY)
# A user's own query on the same H200 VM: other fields, units on every value (% W MHz).
H200_UTIL = captured_lines(
    "h200x2-nvlink-vm",
    "nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,clocks.current.sm,"
    "clocks.current.memory,power.draw --format=csv",
)


def columns(lines: list[str], fields: list[str]) -> list[str]:
    """A capture cut to ``fields``, in that order: what `--query-gpu=<fields>` prints."""
    header = [cell.strip().split(" [", 1)[0] for cell in lines[0].split(",")]
    at = [header.index(field) for field in fields]
    return [", ".join(line.split(", ")[i] for i in at) for line in lines]


def without_units(lines: list[str]) -> list[str]:
    """A capture as `--format=csv,nounits` prints it: the header keeps its units, values lose
    theirs."""
    header = [cell.strip() for cell in lines[0].split(",")]
    units = [cell.split(" [", 1)[1][:-1] if " [" in cell else None for cell in header]
    rows = [
        ", ".join(
            value.removesuffix(f" {unit}") if unit else value
            for value, unit in zip(line.split(", "), units)
        )
        for line in lines[1:]
    ]
    return [lines[0], *rows]


def test_any_subset_of_fields_in_any_order_is_read_by_its_header():
    fields = ["pcie.link.width.max", "pci.bus_id", "pcie.link.width.current", "index"]
    rows = parse_gpu_query_csv(columns(RTX_X8, fields))
    assert [list(row) for row in rows] == [fields] * 8
    assert [(row["index"], row["pcie.link.width.current"]) for row in rows][4:6] == [
        ("4", "16"),
        ("5", "8"),
    ]
    # The same values as the whole query, field by field.
    full = parse_gpu_query_csv(RTX_X8)
    assert rows == [{field: row[field] for field in fields} for row in full]


def test_a_users_own_query_of_other_fields_is_read():
    rows = parse_gpu_query_csv(H200_UTIL)
    assert [row["index"] for row in rows] == ["0", "1"]
    assert rows[1]["power.draw"] == "115.01 W"
    assert "pcie.link.gen.current" not in rows[0]


def test_nounits_reads_the_same_fields_with_bare_values():
    for capture in (H200, H200_UTIL):
        units, bare = parse_gpu_query_csv(capture), parse_gpu_query_csv(without_units(capture))
        assert [list(row) for row in bare] == [list(row) for row in units]
    bare = parse_gpu_query_csv(without_units(H200))
    assert (bare[0]["memory.total"], bare[0]["power.limit"]) == ("143771", "700.00")
    assert bare[0]["pcie.link.gen.hostmax"] is None  # the capture's [N/A]
    assert parse_gpu_query_csv(without_units(H200_UTIL))[0]["utilization.gpu"] == "0"


def test_without_an_index_column_the_bus_id_tells_gpus_apart():
    fields = ["pci.bus_id", "pcie.link.width.current", "pcie.link.width.max"]
    # `-l` prints the header once, then a row per GPU per interval: the x8 reading came last.
    csv = columns(RTX, fields) + columns(RTX_X8, fields)[1:]
    rows = parse_gpu_query_csv(csv)
    assert [row["index"] for row in rows] == [str(i) for i in range(8)]
    assert [row["pcie.link.width.current"] for row in rows] == ["16"] * 5 + ["8"] + ["16"] * 2


def test_one_header_and_several_samples_keep_the_last_row_per_gpu():
    # RTX_X8 then RTX under one header: GPU 5 trained back to x16 in the later sample.
    rows = parse_gpu_query_csv(RTX_X8 + RTX[1:])
    assert len(rows) == 8
    assert rows[5]["pcie.link.width.current"] == "16"
    rows = parse_gpu_query_csv(RTX + RTX_X8[1:])
    assert rows[5]["pcie.link.width.current"] == "8"


def test_each_header_starts_a_sample():
    csv = read_gpu_query_csv(RTX + H200 + H200_UTIL)
    assert [len(sample) for sample in csv.samples] == [8, 2, 2]
    assert csv.fields[1] == "utilization.gpu"


def test_rows_without_a_gpu_column_beyond_any_host_are_refused():
    # Only a width column: with -l every row is a GPU or a sample, which cannot be told.
    fields = ["pcie.link.width.current"]
    assert len(parse_gpu_query_csv(columns(RTX, fields))) == 8
    with pytest.raises(GpuQueryError, match="Add index to --query-gpu"):
        parse_gpu_query_csv(columns(RTX, fields) + columns(RTX, fields)[1:] * 8)


def test_no_header_reads_no_rows():
    csv = read_gpu_query_csv(H200[1:])  # `--format=csv,noheader`
    assert csv.samples == [] and csv.fields == []


def test_a_stream_of_samples_is_read_in_bounded_memory():
    def stream(samples: int):
        yield H200[0]
        for _ in range(samples):
            yield from H200[1:]

    def peak(samples: int) -> int:
        tracemalloc.start()
        rows = parse_gpu_query_csv(stream(samples))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(rows) == 2
        return top

    # 10 times the rows, the same memory (within noise): the peak is ~7 KB for both, while
    # holding the 40,000 lines read (163 bytes each) would take ~6.5 MB, thirty times the
    # 200 KB allowed; 10x shows the bound as well as 100x did, in a tenth of the time.
    assert peak(20_000) < peak(2_000) + 200_000
