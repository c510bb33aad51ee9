"""A model's size read from its own files (config.json, the checkpoint's file sizes)."""
