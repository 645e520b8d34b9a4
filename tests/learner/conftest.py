"""Tiny models gain nothing from intra-op threads; one thread avoids oversubscribing CI."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
