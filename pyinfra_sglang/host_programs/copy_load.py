"""A short host-to-GPU copy load on every GPU at once, run with the SGLang venv's Python
(torch) while the audit samples the PCIe links: an idle link drops its generation, so links
are read under load. Prints {"gpus": [{"index": i, "h2d_gbs": x}]}; exits 3 without CUDA.

    python copy_load.py [SECONDS]
"""

import json
import sys
import time

try:
    import torch
except ImportError:
    print(json.dumps({"error": "torch is not installed"}))
    sys.exit(3)

if not torch.cuda.is_available():
    print(json.dumps({"error": "torch sees no CUDA device"}))
    sys.exit(3)

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
size = 256 << 20  # large enough that the copy, not its launch, is what takes the time
source = torch.empty(size, dtype=torch.uint8, pin_memory=True)
targets = [
    torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}")
    for i in range(torch.cuda.device_count())
]
copies = [0] * len(targets)
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    for index, target in enumerate(targets):
        target.copy_(source, non_blocking=True)
        copies[index] += 1
    for index in range(len(targets)):
        torch.cuda.synchronize(index)
elapsed = time.perf_counter() - start
print(
    json.dumps(
        {
            "gpus": [
                {"index": i, "h2d_gbs": round(n * size / elapsed / 1e9, 1)}
                for i, n in enumerate(copies)
            ]
        }
    )
)
