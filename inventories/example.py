"""One 8-GPU PCIe server: 8x RTX PRO 6000 Blackwell (96 GB, SM120), no NVLink, serving
GLM-5 NVFP4 with tensor parallelism over all eight GPUs (the reference deployment).

    uv run pyinfra inventories/example.py deploy/site.py

Replace the host name and the key file path with yours; every field not set here takes
the default listed in docs/inventory.md. Before the first run, put the host's SSH key in
known_hosts and check its fingerprint out of band (docs/security.md): pyinfra then refuses a
host whose key it does not know, instead of trusting it on first sight.
"""

gpu_servers = [
    (
        "gpu-pcie-01.example.internal",
        {
            "ssh_user": "root",
            # Connect only to a host whose key is already in known_hosts (pre-seeded and
            # checked: docs/security.md). pyinfra's default, accept-new, would trust any key
            # on first contact and override StrictHostKeyChecking in ~/.ssh/config.
            "ssh_strict_host_key_checking": "yes",
            "ssh_known_hosts_file": "known_hosts",
            "expected_gpu_count": 8,
            # What nvidia-smi calls them: validation plans for it, the deploy refuses others.
            "expected_gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            # 590 is a short-lived feature branch (the audit warns); NVIDIA supports 580, 595
            # and 620 (docs/packages.md). CUDA 13.1 needs 590 or later.
            "nvidia_driver_branch": 590,
            # Or one exact release, with NVIDIA's nvidia-driver-pinning-<version>:
            # "nvidia_driver_version": "590.48.01",
            "cuda_version": "13.1",
            "sglang_model_profile": "glm-5-nvfp4",
            # Serve the LAN: a non-loopback bind requires an API key, read from this file
            # on the controller and written root-only on the host.
            "sglang_host": "0.0.0.0",
            # SGLang serves /metrics and /health_generate without the key: on a LAN bind
            # that is allowed only when said (the load and KV-cache gauges, no prompts).
            "sglang_metrics_public": True,
            "sglang_port": 30000,
            "sglang_api_key_file": "secrets/sglang-api-key",
            # For a gated model, the Hub token (a file of one line, 0600):
            # "hf_token_file": "secrets/hf-token",
        },
    ),
]
