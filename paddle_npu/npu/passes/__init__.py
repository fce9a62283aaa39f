"""Stage 2's passes: the contract (framework.py), the rule matcher (rules.py), the passes
every lowering runs (common.py), restructuring (restruct.py), marks, fused preprocessing,
RNN unrolling, the per-layer plans (planning.py), the layout between layers
(channels_last.py) and placement (partition.py)."""
