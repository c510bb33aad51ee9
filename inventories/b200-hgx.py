"""One 8x B200 HGX host (Blackwell, SM100, NVSwitch with NVLink 5), bare metal, with the
driver the deploy installs (`nvidia_driver_source = "managed"`): NVIDIA's repository, the
595 branch with the open kernel modules, Fabric Manager at exactly the driver's release, the
NVLink Subnet Manager and ib_umad that Blackwell HGX needs, the CUDA 13.1 toolkit; then
GLM-5 NVFP4 with tensor parallelism over all eight GPUs.

    uv run pyinfra-sglang validate inventories/b200-hgx.py
    uv run pyinfra inventories/b200-hgx.py deploy/site.py

A host holding Ubuntu's own NVIDIA packages or a runfile driver is refused before any
change, naming what was found and both ways out (docs/hosts.md).

Replace the host name and the key file path with yours; every field not set here takes the
default listed in docs/inventory.md. Put the host's SSH key in known_hosts first and check
its fingerprint out of band (docs/security.md).
"""

gpu_servers = [
    (
        "b200-hgx-01.example.internal",
        {
            "ssh_user": "root",
            "ssh_strict_host_key_checking": "yes",
            "ssh_known_hosts_file": "known_hosts",
            "expected_gpu_count": 8,
            "expected_gpu_model": "NVIDIA B200",
            "nvidia_driver_source": "managed",
            # 595 is a production branch (docs/packages.md); Blackwell runs only on the open
            # kernel modules.
            "nvidia_driver_branch": 595,
            "nvidia_kernel_modules": "open",
            "cuda_version": "13.1",
            "sglang_model_profile": "glm-5-nvfp4",
            "sglang_host": "0.0.0.0",
            "sglang_metrics_public": True,
            "sglang_port": 30000,
            "sglang_api_key_file": "secrets/sglang-api-key",
        },
    ),
]
