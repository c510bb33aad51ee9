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

# An idle H200: its clocks as the real one reported them (nvidia-smi -q -d CLOCK,
# tests/fixtures/gpu/h200-health/health.txt: SM 345 MHz, memory 3201 MHz). No capture of the
# real exporter or of the other readings exists here: they are placeholders (the rest 0), and
# the tests read the series' names and labels, never these values.
VALUES = {
    "DCGM_FI_DEV_SM_CLOCK": 345,
    "DCGM_FI_DEV_MEM_CLOCK": 3201,
    "DCGM_FI_DEV_GPU_TEMP": 31,
    "DCGM_FI_DEV_MEMORY_TEMP": 28,
    "DCGM_FI_DEV_POWER_USAGE": 74.5,
    "DCGM_FI_DEV_FB_FREE": 143156,
    "DCGM_FI_DEV_FB_USED": 0,
}
LABELS = (
    'gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",pci_bus_id="00000000:19:00.0",'
    'device="nvidia0",modelName="NVIDIA H200",Hostname="{hostname}"'
)


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
        out.append(f"{field}{{{labels}}} {VALUES.get(field, 0)}")
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
