"""smg (Shepherd Model Gateway, the SGLang Model Gateway's continuation), as a test stand-in:
the console script ``smg`` (``smg = smg.cli:main``) with ``smg launch ARGS``, standard library
only. ``launch_router.py`` is sglang-router's stand-in, copied in by tests/hosts/pyindex.py."""

from smg.version import __version__ as __version__
