"""Fixtures of the integration tests: the site hosts, after the first apply of site.py."""

from __future__ import annotations

import pytest


@pytest.fixture
def hosts(site_hosts):
    return site_hosts


@pytest.fixture
def inventory(site_inventory, site_first_apply):
    """The site inventory, once deploy/site.py has been applied to its hosts."""
    assert site_first_apply.returncode == 0, site_first_apply.describe()
    return site_inventory
