"""Two 8-GPU hosts that serve one model together with SGLang's multi-node mode
(tensor parallelism across both hosts; the first host is the rendezvous point).

    uv run pyinfra inventories/multinode.py deploy/site.py

The group's shared settings live in group_data/glm5_pair.py beside this file, SSH host key
checking included: put both hosts' keys in known_hosts first (docs/security.md).
"""

glm5_pair = [
    ("gpu-node-01.example.internal", {"ssh_user": "root"}),
    ("gpu-node-02.example.internal", {"ssh_user": "root"}),
]
