"""Arrays to layers: which layers' tiles the chip's arrays hold, in how many groups, and how
many copies of a layer's weights spare arrays hold.

    fits      every layer's tiles on the chip at once (one group); spare arrays hold copies
              of the layers that bound the pipeline, each copy serving part of the layer's
              row vectors (replicate)
    groups    a model larger than the chip runs in groups of consecutive layers, the arrays
              reprogrammed between groups; a layer larger than the chip is split into parts
              of at most the chip's arrays, each in a group of its own
    refuse    the user's choice (`lower --fit refuse`): a model that does not fit is refused,
              naming the smallest chip that holds it

A target of `count = 0` has as many arrays as the model needs: one group, no copies.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from ...errors import ConversionError

FITS = ("groups", "refuse")


@dataclass
class Mapping:
    available: int                 # the chip's arrays (0: as many as needed)
    needed: int                    # arrays holding every layer once
    groups: List[List[Tuple[str, int]]] = field(default_factory=list)  # [(layer, arrays)]
    copies: Dict[str, int] = field(default_factory=dict)   # layer -> copies (>= 1)

    @property
    def used(self):
        """Arrays holding weights at once: the largest group, with its copies."""
        return max((sum(a * self.copies.get(n, 1) for n, a in grp) for grp in self.groups),
                   default=0)

    def group_of(self, layer):
        """The index of every group holding (a part of) the layer."""
        return [i for i, grp in enumerate(self.groups) if any(n == layer for n, _ in grp)]


def map_layers(layers, available, fit="groups", name="the model"):
    """A Mapping of `layers` ([(layer, arrays)] in run order) onto `available` arrays."""
    if fit not in FITS:
        raise ConversionError(f"unknown --fit {fit!r} (known: {', '.join(FITS)})")
    needed = sum(a for _, a in layers)
    m = Mapping(available, needed)
    if not available or needed <= available:
        m.groups = [[(n, a) for n, a in layers if a]] if needed else []
        return m
    if fit == "refuse":
        raise ConversionError(
            f"{name} needs {needed} arrays, the target has {available}: the smallest chip "
            f"that holds it: {needed} arrays (or lower with --fit groups to run it in groups, "
            f"the arrays reprogrammed between them)")
    current, free = [], available
    for n, a in layers:
        while a:
            if free == 0 or (a > free and current and a <= available):
                m.groups.append(current)                # a layer that fits a chip whole
                current, free = [], available           # starts a group rather than split
            part = min(a, free)
            current.append((n, part))
            a, free = a - part, free - part
    if current:
        m.groups.append(current)
    return m


def replicate(m, busy_ns, vectors):
    """Give the spare arrays of a model that fits (one group) to copies of the layers that
    bound the pipeline: of the layers whose arrays fit in what is spare and that have more
    row vectors per image (`vectors`: {layer: n}) than copies (a copy serves whole vectors),
    the one of the longest busy time per copy (`busy_ns`: {layer: ns}) gains a copy, until
    none is left. Sets and returns m.copies."""
    m.copies = {n: 1 for grp in m.groups for n, _ in grp}
    if not m.available or len(m.groups) != 1:
        return m.copies
    arrays = dict(m.groups[0])
    spare = m.available - m.needed
    while True:
        layer = max((n for n in arrays if busy_ns.get(n, 0.0) > 0 and arrays[n] <= spare and
                     m.copies[n] < vectors.get(n, 1)),
                    key=lambda n: (busy_ns[n] / m.copies[n], n), default=None)
        if layer is None:
            return m.copies
        m.copies[layer] += 1
        spare -= arrays[layer]
