"""Two 8-GPU hosts that serve one model together with SGLang's multi-node mode
(tensor parallelism across both hosts; the first host is the rendezvous point).

    uv run pyinfra inventories/multinode.py deploy/site.py

The group's shared settings live in group_data/glm5_pair.py beside this file, SSH host key
checking included: put both hosts' keys in known_hosts first (docs/security.md).
"""

# Addresses on the private network the two hosts share: the group's firewall admits its
# members by address (sglang_multinode_firewall, docs/security.md).
glm5_pair = [
    ("gpu-node-01.example.internal", {"ssh_user": "root", "ssh_hostname": "10.20.0.11"}),
    ("gpu-node-02.example.internal", {"ssh_user": "root", "ssh_hostname": "10.20.0.12"}),
]
