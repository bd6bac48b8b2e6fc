import torch

# Tiny models gain nothing from intra-op threads, and OpenMP spin-waiting makes them
# many times slower when the two CI cores are shared with another process.
torch.set_num_threads(1)
