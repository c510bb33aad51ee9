"""One 8-GPU PCIe server: 8x RTX PRO 6000 Blackwell (96 GB, SM120), no NVLink, serving
GLM-5 NVFP4 with tensor parallelism over all eight GPUs (the reference deployment).

    uv run pyinfra inventories/example.py deploy/site.py

Replace the host name and the key file path with yours; every field not set here takes
the default listed in docs/inventory.md.
"""

gpu_servers = [
    (
        "gpu-pcie-01.example.internal",
        {
            "ssh_user": "root",
            "expected_gpu_count": 8,
            "nvidia_driver_branch": 590,
            "cuda_version": "13.1",
            "sglang_model_profile": "glm-5-nvfp4",
            # Serve the LAN: a non-loopback bind requires an API key, read from this file
            # on the controller and written root-only on the host.
            "sglang_host": "0.0.0.0",
            "sglang_port": 30000,
            "sglang_api_key_file": "secrets/sglang-api-key",
            "hf_token_file": "secrets/hf-token",
        },
    ),
]
