"""sglang, as a test stand-in: ``python -m sglang.launch_server`` runs a small HTTP server
with SGLang's endpoints and canned answers, standard library only; nothing else."""

from sglang.version import __version__ as __version__
