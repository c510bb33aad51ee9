# Settings shared by both hosts of the glm5_pair group (inventories/multinode.py).
# Connect only to hosts whose keys are already in known_hosts (pre-seeded and checked:
# docs/security.md); pyinfra's default, accept-new, trusts any key on first contact.
ssh_strict_host_key_checking = "yes"
ssh_known_hosts_file = "known_hosts"
expected_gpu_count = 8
nvidia_driver_branch = 590
cuda_version = "13.1"
sglang_model_profile = "glm-5-nvfp4"
# One model over both hosts (tensor parallelism across 16 GPUs); the first host is the
# rendezvous, and only the group's members reach its ports (an nftables table per host).
sglang_multinode_group = "glm5_pair"
sglang_host = "0.0.0.0"
# SGLang serves /metrics and /health_generate without the key: allowed on the LAN when said.
sglang_metrics_public = True
sglang_api_key_file = "secrets/sglang-api-key"
hf_token_file = "secrets/hf-token"
# Air-gapped sites: point both repositories at local mirrors.
pypi_index_url = "https://pypi.org/simple"
