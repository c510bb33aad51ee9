"""One field group per role, each with its own rules; config/host_config.py composes them."""
