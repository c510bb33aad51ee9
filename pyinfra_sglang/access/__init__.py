"""How the deploy reaches a host: the SSH user's private transfer folder under sudo
(transfer_folder.py)."""
