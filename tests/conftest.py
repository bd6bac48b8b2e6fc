import pytest
import torch

from bastion import defaults

# Tiny models gain nothing from intra-op threads, and OpenMP spin-waiting makes them
# many times slower when the two CI cores are shared with another process.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _process_settings():
    """Each test starts from the process-wide setting an engine may change: the tree maths'
    fastest paths (its kernels.rank)."""
    yield
    defaults.use_torch_references(False)
