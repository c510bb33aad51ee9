"""pyinfra's project config: pyinfra runs this file, from where it runs, before it connects
to any host (its --config option, default config.py). It adds what to do after each host
pyinfra cannot reach, even when no host is left and the run ends ("No hosts remaining!")
before any deploy file, and the run's summary, is loaded (checks/run_summary.py)."""

from pyinfra import state

from checks.run_summary import explain_connect_errors

explain_connect_errors(state)
