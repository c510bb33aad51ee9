"""The model role alone, its weights fetched once a site
(tests/integration/test_model_seed_on_private_hosts.py): its hosts sit on a private network
that cannot reach the stand-in package repositories the rest of deploy/site.py needs; the
venv the model's programs run in is made by the test. Validation and the transfer folder
come first, as in deploy/site.py."""

from pyinfra import host

from pyinfra_sglang.inventory import host_config
from roles.model import model_weights
from roles.transfers import transfer_folder

host_config(host)
transfer_folder()
model_weights()
