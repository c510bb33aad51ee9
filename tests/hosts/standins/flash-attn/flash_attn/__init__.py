"""flash-attn, as a test stand-in: no kernels; build_env.json tells how it was built."""

from flash_attn.version import __version__ as __version__
