"""The links between GPUs: PCIe generations and widths (pcie.py), peer-to-peer paths and the
NCCL hints they call for (p2p.py)."""
