"""Parser of PCIe Access Control Services (ACS) state above each NVIDIA GPU: `lspci -vvv`
blocks of the bridges on each GPU's path to its root complex, as the PcieAcs fact prints them.

lspci prints one block per device: a header line at column 0 (``0000:40:01.1 PCI bridge:
...`` with -D, ``00:01.1 ...`` without), then indented lines (tabs, or spaces in some
pastes). The ACS capability shows its control register as
``ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-``
('+' on); a bridge without an ACS capability prints no such line (ACS off). Run without
root, lspci prints ``Capabilities: <access denied>`` in place of every capability: the state
is unknown then, never "off".

The fact's own lines: ``### lspci yes|no`` (is lspci installed) and ``### gpu <sysfs path>``
per NVIDIA GPU, the path ``readlink -f /sys/bus/pci/devices/<addr>`` gives
(``/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0``): every PCI address in it before the
GPU's own is a bridge above it, nearest last.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypedDict

_ADDRESS = r"(?:[0-9a-f]{4,}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_HEADER = re.compile(rf"^(?P<address>{_ADDRESS}) (?P<name>.+)$", re.IGNORECASE)
_PATH_ADDRESS = re.compile(rf"^{_ADDRESS}$", re.IGNORECASE)
_ACS_CTL = re.compile(r"^\s+ACSCtl:\s*(?P<flags>.*)$")
_FLAG = re.compile(r"([A-Za-z]+)([+-])")
_PORT = re.compile(r"Express \(v\d\) (?P<port>[A-Za-z ]+?(?:Port|Endpoint|Bridge))\b")
_DENIED = "<access denied>"


class BridgeAcs(TypedDict):
    name: str
    port: str | None  # "Root Port", "Downstream Port", "Upstream Port"; None: not shown
    # ACSCtl's flags ({"ReqRedir": True, ...}); {} when the bridge has no ACS capability;
    # None when lspci could not read its capabilities (not root).
    acs_ctl: dict[str, bool] | None


class PcieAcsDict(TypedDict):
    lspci: bool  # lspci is installed
    gpus: dict[str, list[str]]  # GPU address -> bridge addresses above it, nearest first
    bridges: dict[str, BridgeAcs]  # the blocks lspci printed, by full address


def full_address(address: str) -> str:
    """``00:01.1`` -> ``0000:00:01.1`` (lspci without -D leaves the domain out)."""
    address = address.lower()
    return address if address.count(":") == 2 else f"0000:{address}"


def parse_lspci_blocks(lines: Iterable[str]) -> dict[str, BridgeAcs]:
    """Each ``lspci -vvv`` block's name, PCIe port type and ACS control flags, by address."""
    blocks: dict[str, BridgeAcs] = {}
    current: BridgeAcs | None = None
    for line in lines:
        line = line.rstrip("\r\n")
        header = _HEADER.match(line)
        if header:
            current = {"name": header["name"].strip(), "port": None, "acs_ctl": {}}
            blocks[full_address(header["address"])] = current
            continue
        if current is None or not line.strip():
            continue
        if _DENIED in line and "Capabilities" in line:
            current["acs_ctl"] = None
            continue
        port = _PORT.search(line)
        if port and current["port"] is None:
            current["port"] = port["port"]
        acs = _ACS_CTL.match(line)
        if acs and current["acs_ctl"] is not None:
            current["acs_ctl"] = {flag: sign == "+" for flag, sign in _FLAG.findall(acs["flags"])}
    return blocks


def gpu_chain(sysfs_path: str) -> tuple[str, list[str]] | None:
    """(GPU address, bridges above it nearest first) from its resolved sysfs path."""
    addresses = [
        part.lower() for part in sysfs_path.strip().split("/") if _PATH_ADDRESS.match(part)
    ]
    if not addresses:
        return None
    return addresses[-1], list(reversed(addresses[:-1]))


def parse_pcie_acs(output: Iterable[str]) -> PcieAcsDict:
    """The PcieAcs fact's output: its ``###`` lines, then the bridges' lspci blocks."""
    lspci, gpus, rest = False, {}, []
    for line in output:
        if line.startswith("### lspci "):
            lspci = line.split()[-1] == "yes"
        elif line.startswith("### gpu "):
            chain = gpu_chain(line[len("### gpu ") :])
            if chain:
                gpus[chain[0]] = chain[1]
        else:
            rest.append(line)
    return {"lspci": lspci, "gpus": gpus, "bridges": parse_lspci_blocks(rest)}
