"""Checking a lowered model: the NumPy reference, the chip's bit-true simulator
(reference.py, reference_layers.py), the float64 run (float64.py), selections (selection.py)
and `verify` (verifier.py)."""
