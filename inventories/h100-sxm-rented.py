"""One rented 8x H100 SXM host (HGX, NVSwitch) on an Ubuntu 24.04 image whose provider
installed the NVIDIA driver, Fabric Manager and a CUDA toolkit: the deploy uses them as
they are (`nvidia_driver_source = "host"`) and installs everything after the driver.

    uv run pyinfra-sglang validate inventories/h100-sxm-rented.py
    uv run pyinfra inventories/h100-sxm-rented.py deploy/site.py

Before any change, planning checks what the host runs: a driver every GPU's architecture
runs on and whose branch runs `cuda_version`'s builds (CUDA 13.x on branch 580 or later),
Fabric Manager active at the driver's release, and CUDA 13.0's toolkit
(/usr/local/cuda-13.0/bin/nvcc) where flash-attn is built; it refuses the host otherwise,
naming what it found (docs/hosts.md). Set `cuda_version` to a toolkit the image has.

Replace the host name and the key file path with yours; every field not set here takes the
default listed in docs/inventory.md. Put the host's SSH key in known_hosts first and check
its fingerprint out of band (docs/security.md).
"""

gpu_servers = [
    (
        "h100-sxm-01.example.internal",
        {
            "ssh_user": "root",
            "ssh_strict_host_key_checking": "yes",
            "ssh_known_hosts_file": "known_hosts",
            "expected_gpu_count": 8,
            "expected_gpu_model": "NVIDIA H100 80GB HBM3",
            # The provider's driver, Fabric Manager and toolkit, used as they are: NVIDIA's
            # repository, the driver and the CUDA Toolkit roles change nothing.
            "nvidia_driver_source": "host",
            # The toolkit the image ships (CUDA 13.x runs on the provider's 580 driver).
            "cuda_version": "13.0",
            # NVFP4 needs Blackwell: a dense bf16 model on Hopper. To serve yours, add
            # "sglang_profile_overrides": {"model": "org/name"}: validate reads its size from
            # its config.json on the Hub and prints the fit, or refuses it with the numbers.
            # `pyinfra-sglang profile new org/name` writes it a profile of its own, and
            # `pyinfra-sglang plan --model org/name --inventory ...` compares layouts
            # (docs/profiles.md).
            "sglang_model_profile": "dense-bf16",
            "sglang_host": "0.0.0.0",
            "sglang_metrics_public": True,
            "sglang_port": 30000,
            "sglang_api_key_file": "secrets/sglang-api-key",
        },
    ),
]
