"""Check-only audit: `pyinfra INVENTORY deploy/audit.py` (or `pyinfra @local deploy/audit.py`
on the machine you are on). Reads every host in parallel, prints a table per host, writes
a JSON report per host, changes nothing, and exits non-zero when any finding fails."""

from pyinfra import host

from checks.audit import audit_host
from pyinfra_sglang.inventory import host_config

config = host_config(host)
audit_host(
    name="Audit GPUs, driver, CUDA, links and the SGLang service",
    config=config,
    report_dir=config.audit_report_dir,
)
