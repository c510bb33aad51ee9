"""Check-only audit: `pyinfra INVENTORY deploy/audit.py` (or `pyinfra @local deploy/audit.py`
on the machine you are on). Reads every host in parallel, prints a table per host, writes
a JSON report per host (a host that cannot be connected to too, saying so), changes nothing,
ends with one line a host, and exits non-zero when any finding fails or a host is
unreachable."""

from pyinfra import host, state

from checks.audit import audit_host, report_unreachable
from checks.run_summary import run_summary
from pyinfra_sglang.inventory import host_config

run_summary(state, on_unreachable=report_unreachable)
config = host_config(host)
audit_host(
    name="Audit GPUs, driver, CUDA, links and the SGLang service",
    config=config,
    report_dir=config.audit_report_dir,
)
