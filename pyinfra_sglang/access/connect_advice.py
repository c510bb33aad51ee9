"""What to do about a host pyinfra could not connect to, from the error its SSH connector
raised: the messages are pyinfra 3.x's own (pyinfra/connectors/ssh.py: "Could not resolve
hostname", "Could not connect", "Authentication error", "SSH host key error"; and
sshuserclient/client.py's StrictPolicy: "No host key for HOST found in known_hosts").
One line a host, in the run's summary and as the connection fails."""

from __future__ import annotations

# (a phrase of the connector's error, what to do): the first phrase found decides.
ADVICE = (
    (
        "found in known_hosts",
        "its key is not in the inventory's known_hosts (ssh_known_hosts_file): add it after "
        "checking its fingerprint on the host's console (docs/security.md#ssh-host-keys; "
        "`pyinfra-sglang validate` names the file and the steps)",
    ),
    (
        "does not match",
        "its host key changed since it was recorded: a reinstalled host, or someone else "
        "answering on its address; check the fingerprint on its console before replacing the "
        "entry (docs/security.md#ssh-host-keys)",
    ),
    (
        "Could not resolve hostname",
        "the controller cannot resolve its name: set ssh_hostname to its address, or fix DNS "
        "(docs/inventory.md)",
    ),
    (
        "Authentication error",
        "SSH refused the login: check ssh_user and ssh_key (or the agent) for this host "
        "(docs/inventory.md)",
    ),
    (
        "Could not connect",
        "nothing answered SSH on its address and port: check ssh_hostname, ssh_port, that "
        "sshd runs and that a firewall lets the controller in",
    ),
)


def connect_advice(error: str) -> str | None:
    """What to do about ``error`` (the connector's message), or None when it is not one of
    the errors above (the message then stands alone)."""
    for phrase, advice in ADVICE:
        if phrase in error:
            return advice
    return None


def unreachable_reason(error: str) -> str:
    """The error with what to do about it, as the summary's reason for an unreachable host."""
    advice = connect_advice(error)
    return f"{error}; {advice}" if advice else error
