"""The network between hosts: the multi-node group's firewall (multinode_firewall.py)."""
