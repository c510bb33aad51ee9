"""The model's files on a host: the Hub snapshot and revision (model_snapshot.py) and the
cache folder the service user comes to own (cache_dir.py)."""
