import pytest
import torch

from bastion import defaults

# Tiny models gain nothing from intra-op threads, and OpenMP spin-waiting makes them
# many times slower when the two CI cores are shared with another process.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _process_settings():
    """Each test starts from the process-wide settings a run may change: one CPU thread (a
    run's --threads) and the tree maths' fastest paths (an engine's kernels.rank)."""
    yield
    torch.set_num_threads(1)
    defaults.use_torch_references(False)
