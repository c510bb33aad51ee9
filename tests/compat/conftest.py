"""The compat marker, registered here too so that ``--strict-markers`` accepts
``pytest.mark.compat`` whether or not pyproject.toml lists it yet (a repeated entry is
harmless)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "compat: checks rendered output against real SGLang releases installed from PyPI "
        "(first run builds cached venvs)",
    )
