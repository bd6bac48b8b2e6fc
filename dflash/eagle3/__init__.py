"""EAGLE-3 draft heads: loading public checkpoints, drafting a dynamic tree, training.

Submodules: :mod:`.config` (config + tapped-layer convention), :mod:`.model` (the head and
its KV cache), :mod:`.checkpoint` (strict loading/saving), :mod:`.tree` (depth-wise top-k
tree drafting), :mod:`.ttt` (the training-time test and its per-step scores) and
:mod:`.train` (the trainer and its CLI).  Nothing here
imports ``bastion``.
"""
