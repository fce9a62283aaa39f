"""What an analog array returns to an integer layer: weights sliced over cells of a few
bits, inputs fed a few bits per cycle, each column's sum digitised by an ADC, the digits
shifted and added (QVMM's `cell_bits`, `dac_bits`, `adc_bits`, `weight_scheme`,
`adc_shifts`; a target's [precision] table).

    weight  w (signed, B bits). differential: w = w+ - w- (each B-1 bits, the other 0),
            each cut into S = ceil((B-1) / c) slices of c = cell_bits bits on columns of
            their own (2 S columns a weight); offset: w + 2^(B-1) (B bits, unsigned) in
            S = ceil(B / c) slices (S columns), the offset's share, 2^(B-1) * sum(x), taken
            off digitally
    input   x (signed, A bits) as sign and magnitude (the DAC drives either polarity): the
            magnitude's K = ceil(A / d) slices of d = dac_bits bits, one per cycle, each
            with the input's sign
    column  y = x_k . w_s (an integer the array sums exactly); the ADC returns
            clip(round_half_even(y / 2^e), -(2^(b-1) - 1), 2^(b-1) - 1) * 2^e, b = adc_bits, e the
            layer's shift for that pair of slices (`adc_shifts`: the smallest that holds the
            largest sum the columns can reach, their full scale, or, calibrated on sample
            inputs, the largest they reached)
    sum     acc = sum over k, s of 2^(d k + c s) * (ADC(y+) - ADC(y-)); offset: of ADC(y),
            less the offset's share

A setting of 0 is the ideal one (a weight in one cell, the whole input at once, an exact
read-out); with all three ideal, QVMM is the exact product of ops/quant.py. With every
setting finite but an ADC wide enough for every column sum, the product is exact too.
"""
from dataclasses import dataclass

import numpy as np

@dataclass(frozen=True)
class Readout:
    cell_bits: int = 0            # bits per cell (0: a weight in one cell)
    dac_bits: int = 0             # input bits per cycle (0: the whole input at once)
    adc_bits: int = 0             # ADC bits (0: an exact read-out)
    weight_scheme: str = "differential"

    @property
    def ideal(self):
        return not (self.cell_bits or self.dac_bits or self.adc_bits)

    def attrs(self):
        return {"cell_bits": self.cell_bits, "dac_bits": self.dac_bits,
                "adc_bits": self.adc_bits, "weight_scheme": self.weight_scheme}


def of_attrs(a):
    """The Readout of a QVMM's attributes."""
    return Readout(a["cell_bits"], a["dac_bits"], a["adc_bits"], a["weight_scheme"])


def _bits_of(dtype):
    return np.iinfo(dtype).bits


def weight_slices(w, bits, r):
    """[(shift, sign, slice)] of an integer weight matrix of `bits` bits: its columns'
    cells (each slice an int64 matrix of values below 2^cell_bits)."""
    w = w.astype(np.int64)
    if r.weight_scheme == "differential":
        mag, parts = bits - 1, ((1, np.maximum(w, 0)), (-1, np.maximum(-w, 0)))
    else:
        mag, parts = bits, ((1, w + (1 << (bits - 1))),)
    c = r.cell_bits if 0 < r.cell_bits < mag else mag
    count = -(-mag // c)
    return [(c * s, sign, (part >> (c * s)) & ((1 << c) - 1))
            for s in range(count) for sign, part in parts]


def input_slices(x, bits, r):
    """[(shift, slice)] of integer rows of `bits` bits fed `dac_bits` of their magnitude at
    a time, each slice with the row's sign."""
    x = x.astype(np.int64)
    d = r.dac_bits if 0 < r.dac_bits < bits else bits
    count = -(-bits // d)
    if count == 1:
        return [(0, x)]
    sign, mag = np.sign(x), np.abs(x)
    return [(d * k, sign * ((mag >> (d * k)) & ((1 << d) - 1))) for k in range(count)]


def slice_pairs(xbits, wbits, r):
    """How many (input slice, weight slice) pairs a product has: the length of
    `adc_shifts`."""
    d = r.dac_bits if 0 < r.dac_bits < xbits else xbits
    mag = wbits - 1 if r.weight_scheme == "differential" else wbits
    c = r.cell_bits if 0 < r.cell_bits < mag else mag
    return -(-xbits // d) * -(-mag // c) * (2 if r.weight_scheme == "differential" else 1)


def columns_per_weight(wbits, r):
    """Columns of cells one weight takes."""
    mag = wbits - 1 if r.weight_scheme == "differential" else wbits
    c = r.cell_bits if 0 < r.cell_bits < mag else mag
    return -(-mag // c) * (2 if r.weight_scheme == "differential" else 1)


def input_cycles(xbits, r):
    d = r.dac_bits if 0 < r.dac_bits < xbits else xbits
    return -(-xbits // d)


def full_scale_shifts(w, xbits, r):
    """The ADC shift of every slice pair (input slices outer, weight slices inner): the
    smallest e with every column's largest sum (its cells times the input slice's largest
    magnitude, summed over the rows) within 2^e (2^(b-1) - 1). [] for an exact read-out."""
    if not r.adc_bits:
        return []
    wbits = _bits_of(w.dtype)
    d = r.dac_bits if 0 < r.dac_bits < xbits else xbits
    count = -(-xbits // d)
    shifts = []
    for k in range(count):
        # the largest slice value of a magnitude up to 2^(A-1)
        reach = min((1 << d) - 1, (1 << (xbits - 1)) >> (d * k)) if count > 1 \
            else 1 << (xbits - 1)
        for _, _, ws in weight_slices(w, wbits, r):
            shifts.append(shift_for(int(ws.sum(axis=0).max(initial=0)) * reach, r.adc_bits))
    return shifts


def shift_for(peak, bits):
    """The smallest ADC shift e whose 2^(b-1) - 1 codes of 2^e hold `peak`."""
    top, e = (1 << (bits - 1)) - 1, 0
    while peak > top << e:
        e += 1
    return e


def adc(y, shift, bits):
    """The ADC's reading of column sums `y` (exact integers, int64, or analog ones with
    noise, float64) with step 2^shift: the nearest code (a tie to the even one), saturated
    at the symmetric range of a sign-magnitude ADC (2^(b-1) - 1 codes either side of 0)."""
    hi = (1 << (bits - 1)) - 1
    lo = -hi
    if shift or y.dtype.kind == "f":
        y = np.rint(y / float(1 << shift)).astype(np.int64)    # (exact: |y| < 2^53)
    return np.clip(y, lo, hi) << shift


def _cell_bits(wbits, r):
    mag = wbits - 1 if r.weight_scheme == "differential" else wbits
    return r.cell_bits if 0 < r.cell_bits < mag else mag


class Noise:
    """One draw of the cells' non-idealities, seeded: each cell programmed off its level by
    a normal error of `programming` (a fraction of the cell's whole range, drawn once per
    node and slice), and every read off by a normal error of `read` per cell (the same
    fraction, times the input driving it)."""

    def __init__(self, seed, programming, read):
        self.rng = np.random.default_rng(seed)
        self.programming, self.read = programming, read
        self.cells = {}                    # (node, slice) -> the programmed conductances

    def of(self, node):
        return _NodeNoise(self, node)


class _NodeNoise:
    def __init__(self, noise, node):
        self.noise, self.node = noise, node

    def programmed(self, j, cells, levels):
        """Slice j's cells (integer levels) as programmed: levels plus the error."""
        key = (self.node, j)
        held = self.noise.cells.get(key)
        if held is None or held.shape != cells.shape:
            err = self.noise.rng.standard_normal(cells.shape) * self.noise.programming * levels
            held = self.noise.cells[key] = cells + err
        return held

    def read(self, xs, y, levels):
        """Column sums y read with each cell's read error: sigma * levels * |x| summed in
        quadrature over the rows."""
        if not self.noise.read:
            return y
        spread = np.sqrt((xs.astype(np.float64) ** 2).sum(axis=-1, keepdims=True))
        return y + self.noise.rng.standard_normal(y.shape) * self.noise.read * levels * spread


def sliced_product(x, w, r, shifts, peaks=None, clips=None, noise=None):
    """x [..., R] @ w [R, M] on integers as the array computes it (int64). peaks: a list
    kept, per pair of slices, the largest |column sum| seen (the ADC's calibration); clips:
    [readings that saturated, readings], counted on; noise: a draw of the cells' errors
    (Noise.of(node)), whose analog sums the ADC digitises (an ADC is needed)."""
    xbits, wbits = _bits_of(x.dtype), _bits_of(w.dtype)
    ws = weight_slices(w, wbits, r)
    if noise is not None:
        if not r.adc_bits:
            raise ValueError("cell noise needs an ADC to read the analog sums (adc_bits)")
        levels = float((1 << _cell_bits(wbits, r)) - 1)
        ws = [(kw, sign, noise.programmed(j, wsl, levels)) for j, (kw, sign, wsl) in
              enumerate(ws)]
    # products in float64 (BLAS; exact: every sum is an integer below 2^53)
    ws = [(kw, sign, wsl.astype(np.float64)) for kw, sign, wsl in ws]
    acc = 0
    i = 0
    for kx, xs in input_slices(x, xbits, r):
        xf = xs.astype(np.float64)
        for kw, sign, wsl in ws:
            y = xf @ wsl
            if noise is not None:
                y = noise.read(xs, y, levels)
            else:
                y = y.astype(np.int64)
            if peaks is not None:
                if len(peaks) <= i:
                    peaks.append(0)
                peaks[i] = max(peaks[i], int(np.abs(y).max(initial=0)))
            if r.adc_bits:
                if clips is not None:
                    full = ((1 << (r.adc_bits - 1)) - 1) << shifts[i]
                    clips[0] += int(np.sum(np.abs(y) > full))
                    clips[1] += y.size
                y = adc(y, shifts[i], r.adc_bits)
            acc = acc + (sign * y << (kx + kw))
            i += 1
    if r.weight_scheme == "offset":
        acc = acc - (x.astype(np.int64).sum(axis=-1, keepdims=True) << (wbits - 1))
    return np.asarray(acc, np.int64)
