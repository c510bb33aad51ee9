"""sglang-router (SGLang Model Gateway), as a test stand-in: ``python -m
sglang_router.launch_router`` routes to SGLang servers round robin; standard library only."""

from sglang_router.version import __version__ as __version__
