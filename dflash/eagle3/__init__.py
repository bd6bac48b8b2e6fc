"""EAGLE-3 draft heads: loading public checkpoints, drafting a dynamic tree, training.

Submodules: :mod:`.config` (config + tapped-layer convention), :mod:`.model` (the head and
its KV cache), :mod:`.checkpoint` (strict loading/saving), :mod:`.tree` (depth-wise top-k
tree drafting) and :mod:`.train` (training-time-test trainer and CLI).  Nothing here
imports ``bastion``.
"""
