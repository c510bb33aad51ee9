#!/usr/bin/python3
# Test double, not NVIDIA's program: /usr/bin/dcgm-exporter of the stand-in
# datacenter-gpu-manager-exporter (tests/hosts/aptrepo.py). Serves /metrics in Prometheus's
# text format: one gauge or counter per uncommented line of the counters file (-f), for one
# GPU, labelled as dcgm-exporter labels them; listens on -a/--address (default ":9400").
import argparse
import http.server
import os
import socket
import sys

# One idle H200, every reading from one real capture of it: GPU 0 (00000000:00:06.0) of the
# 2x H200 VM, `nvidia-smi -q` at 2026-11-30 02:33:50, tests/fixtures/gpu/h200x2-nvlink-vm/
# smi_q.txt (line numbers there). The counters file's fields (tests/hosts/aptrepo.py
# DCGM_COUNTERS) all have a value here; a field this table lacks reads 0 (the counters file
# lists none such). No test reads a value: tests/unit/test_aptrepo.py and
# tests/integration/test_monitoring_on_hosts.py read the series' names, types and labels.
VALUES = {
    "DCGM_FI_DEV_SM_CLOCK": 375,  # Clocks, SM: 375 MHz (line 220)
    "DCGM_FI_DEV_MEM_CLOCK": 3201,  # Clocks, Memory: 3201 MHz (line 221)
    "DCGM_FI_DEV_GPU_TEMP": 35,  # GPU Current Temp: 35 C (line 187)
    # Not in the stand-in's counters file; served if a counters file lists it.
    "DCGM_FI_DEV_MEMORY_TEMP": 36,  # Memory Current Temp: 36 C (line 193)
    # POWER_USAGE (field 155, "Power usage for the device in Watts") is not the instantaneous
    # reading, which is DCGM_FI_DEV_POWER_USAGE_INSTANT (157): go-dcgm pkg/dcgm/dcgm_fields.h
    # at ec245c09fe3e26c559b0021a6884dd1ce2ebb4ca (the go-dcgm of dcgm-exporter 4.8.2's
    # go.mod). On Hopper NVML's power usage is the 1 s average (nvmlDeviceGetPowerUsage:
    # "On Ampere (except GA100) or newer GPUs, the API returns power averaged over 1 sec"):
    # Average Power Draw, 110.30 W (line 196), not the Instantaneous 77.56 W (line 197).
    "DCGM_FI_DEV_POWER_USAGE": 110.30,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 2,  # PCIe, Replays Since Reset: 2 (line 86)
    "DCGM_FI_DEV_GPU_UTIL": 0,  # Utilization, GPU: 0 % (line 126)
    "DCGM_FI_DEV_MEM_COPY_UTIL": 0,  # Utilization, Memory: 0 % (line 127)
    # No Xid: 0, as the real exporter reports a GPU without one (err_code="0", err_msg="No
    # Error": github.com/linode/lke-ai-conformance README.md, "Accelerator Metrics", at
    # d8c3facaf53aa39ed506305312118c8d93854d78, a real dcgm-exporter /metrics). smi_q.txt
    # holds no kernel log; the H200's, tests/fixtures/gpu/h200-health/health.txt, has no Xid.
    "DCGM_FI_DEV_XID_ERRORS": 0,
    "DCGM_FI_DEV_FB_FREE": 143156,  # FB Memory Usage, Free: 143156 MiB (line 115)
    "DCGM_FI_DEV_FB_USED": 0,  # FB Memory Usage, Used: 0 MiB (line 114)
}
# The labels as dcgm-exporter 4.8.2 (tag 4.5.3-4.8.2, 691c92762eb551313c825f6efe4ceeee20982801,
# the exporter of datacenter-gpu-manager-exporter 4.8.2-1) writes them:
# internal/pkg/rendermetrics/render_metrics.go, the GPU template (line 47): gpu, UUID,
# pci_bus_id, device, modelName, then Hostname when the exporter has a hostname (the default;
# --no-hostname drops it); the label `UUID` is set in internal/pkg/collector/gpu_collector.go
# (`uuid := "UUID"`; "uuid" with --use-old-namespace), device is fmt.Sprintf("nvidia%d", GPU
# index), modelName the GPU's model. After 4.8.2 the label became `hostname` (commit
# d5e5f510a1b6b393f39a43293ccd9dc985defc79, "Rename Hostname label to hostname (#655)"), in no
# release yet. The values from smi_q.txt: GPU UUID (line 27), Bus Id (line 71), Product Name
# (line 10), Minor Number 0 (line 29). Tests read gpu, UUID's "GPU-" prefix and device
# (tests/unit/test_aptrepo.py) and gpu (tests/integration/test_monitoring_on_hosts.py).
LABELS = (
    'gpu="0",UUID="GPU-319db826-c017-8cd5-c88f-5335bdd0434f",pci_bus_id="00000000:00:06.0",'
    'device="nvidia0",modelName="NVIDIA H200",Hostname="{hostname}"'
)
# The Xid series' own labels, after the others (gpu_collector.go: err_code and err_msg from
# xid_errors.go's table, 0 -> "No Error").
XID_LABELS = ',err_code="0",err_msg="No Error"'
# How the exporter prints a value (gpu_collector.go toString): an integer field with %d, a
# double field with %f ("110.300000"); of these fields only POWER_USAGE is a double.


def text(value) -> str:
    return f"{value:f}" if isinstance(value, float) else str(value)


def counters(path):
    found = []
    with open(path) as lines:
        for line in lines:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            field, kind, help_text = (part.strip() for part in line.split(",", 2))
            found.append((field, kind, help_text))
    return found


def page(fields):
    labels = LABELS.format(hostname=socket.gethostname())
    out = []
    for field, kind, help_text in fields:
        out += [f"# HELP {field} {help_text}", f"# TYPE {field} {kind}"]
        extra = XID_LABELS if field == "DCGM_FI_DEV_XID_ERRORS" else ""
        out.append(f"{field}{{{labels}{extra}}} {text(VALUES.get(field, 0))}")
    return ("\n".join(out) + "\n").encode()


def main():
    parser = argparse.ArgumentParser(prog="dcgm-exporter")
    parser.add_argument(
        "-f",
        "--collectors",
        default=os.environ.get(
            "DCGM_EXPORTER_COLLECTORS", "/etc/dcgm-exporter/default-counters.csv"
        ),
    )
    parser.add_argument("-a", "--address", default=os.environ.get("DCGM_EXPORTER_LISTEN", ":9400"))
    args = parser.parse_args()
    body = page(counters(args.collectors))
    host, _, port = args.address.rpartition(":")
    host = host.strip("[]")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host or not host else socket.AF_INET

    server = Server((host or "::", int(port)), Handler)
    print(f"dcgm-exporter (test double): listening on {args.address}", file=sys.stderr)
    server.serve_forever()


if __name__ == "__main__":
    main()
