"""The `pyinfra-sglang` command: one module per subcommand, the shared argument types
(arguments.py), --json (json_output.py) and an inventory file as input (inventory_input.py);
main.py holds the table of commands (``COMMANDS``) and the entry point (``main``)."""
