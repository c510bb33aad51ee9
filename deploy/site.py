"""Provision and serve: `uv run pyinfra INVENTORY deploy/site.py`.

Every host's inventory data is validated first; bad data stops the run before any host is
changed. Roles follow in dependency order. Ends with one line a host: ok, changed N, failed
(why), unreachable; with `--dry`, the operations that would change it, or "no change".
"""

from pyinfra import host, state

from checks.run_summary import note_plan, run_summary
from pyinfra_sglang.inventory import host_config
from roles.base import base
from roles.cuda_toolkit import cuda_toolkit
from roles.dcgm import dcgm
from roles.fabric_manager import fabric_manager
from roles.flash_attn import flash_attn
from roles.model import model_weights
from roles.monitoring import monitoring
from roles.monitoring_firewall import monitoring_firewall
from roles.multinode_firewall import multinode_firewall
from roles.multinode_preflight import multinode_preflight
from roles.nvidia_driver import nvidia_driver
from roles.nvidia_repo import nvidia_repo
from roles.python_env import python_env
from roles.sglang_service import sglang_service_role
from roles.transfers import transfer_folder

run_summary(state)
host_config(host)
transfer_folder()  # before the first upload

base()
nvidia_repo()
nvidia_driver()
fabric_manager()
cuda_toolkit()
dcgm()
python_env()
flash_attn()
multinode_firewall()
model_weights()
multinode_preflight()  # a group about to start: proven able to all-reduce first
sglang_service_role()
# Before the exporters it filters are installed, or restarted on a new address.
monitoring_firewall()
monitoring()
note_plan(state, host)
