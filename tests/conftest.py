"""The order tests run in: the end-to-end ones (marked ``slow``) first, the short ones after.

With two workers (``python -m pytest -q -n 2``), a long test that starts last runs alone at
the end while the other worker idles; started first, the short tests fill in beside it.
The order within each group is the collection's own. No test depends on another's order.
"""

from __future__ import annotations


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
