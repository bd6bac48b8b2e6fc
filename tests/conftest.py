import sys
from pathlib import Path

import torch

# the test helpers (tests/builders.py) are imported as a plain module
sys.path.insert(0, str(Path(__file__).parent))

# Tiny models gain nothing from intra-op threads, and OpenMP spin-waiting makes them
# many times slower when the two CI cores are shared with another process.
torch.set_num_threads(1)
