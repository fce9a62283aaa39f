"""The chip: targets (target.py), how a kernel matrix is cut into array tiles (tiling.py),
the per-layer plans (plan.py) and what they cost (cost.py)."""
