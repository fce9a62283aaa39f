"""Our analog read-out (ops/readout.py) against CrossSim (Sandia's simulator of analog
in-memory computing), on matrix layers of several sizes: weights sliced over cells of 1, 2
or 4 bits (CrossSim's bit-sliced core, differential pairs subtracted digitally or offset
weights), whole 8-bit inputs, every slice read by an ADC of 4 to 8 bits, matrices of 1 to 4
arrays of rows; noise, drift and parasitics off.

    python tools/bench_crosssim.py --crosssim DIR [--seed 0]

DIR is a checkout of https://github.com/sandialabs/cross-sim (its `simulator` package is
imported from there; it is not a dependency of paddle_npu). Each configuration gives CrossSim
the ADC steps our reference chose (its calibrated range per slice is that step times its
levels, devices of infinite on/off ratio) and compares the outputs, in units of one step of
the most significant slice's ADC: `max diff` is the largest difference, `same` the share of
outputs equal. Then every ADC reading CrossSim makes is set beside ours on the same column
sum (`readings`): they may differ only where the sum falls exactly halfway between two codes
(`ties`: ours takes the even code, CrossSim computes in floats scaled to its range, where a
tie lands on either side), by one step; `wrong` counts any other difference and must be 0
(exit status 1 otherwise). A tie moves the output by one step of that reading, at its weight
in the sum: hence `max diff`.
"""
import argparse
import itertools
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from paddle_npu.npu.ops import readout  # noqa: E402
from paddle_npu.npu.ops.readout import (Readout, full_scale_shifts,  # noqa: E402
                                        sliced_product, weight_slices)

XMAX = 127          # inputs in [-127, 127]: CrossSim's sign-magnitude DAC of 8 bits


def shared_shifts(w, rows, r):
    """One ADC shift per weight slice for every array of rows and both columns of a pair
    (CrossSim gives one ADC range to a slice): the largest our reference picks."""
    per_tile = [full_scale_shifts(w[i:i + rows], 8, r) for i in range(0, w.shape[0], rows)]
    pairs = 2 if r.weight_scheme == "differential" else 1
    worst = np.max(np.array(per_tile), axis=0).reshape(-1, pairs).max(axis=1)
    return [int(e) for e in worst for _ in range(pairs)]


def ours(x, w, rows, r, shifts):
    """The reference on arrays of `rows` rows: each array's product read out, summed."""
    return sum(sliced_product(x[..., i:i + rows], w[i:i + rows], r, shifts)
               for i in range(0, w.shape[0], rows))


def crosssim(x, w, rows, r, shifts):
    from simulator import AnalogCore, CrossSimParameters
    from simulator.parameters.core_parameters import (BalancedCoreStyle, BitSlicedCoreStyle,
                                                      CoreStyle)
    from simulator.parameters.xbar_parameters import ADCRangeLimits

    slices = len(weight_slices(w, 8, r)) // (2 if r.weight_scheme == "differential" else 1)
    p = CrossSimParameters()
    p.core.style = CoreStyle.BITSLICED
    p.core.bit_sliced.num_slices = slices
    p.core.bit_sliced.style = (BitSlicedCoreStyle.BALANCED if r.weight_scheme == "differential"
                               else BitSlicedCoreStyle.OFFSET)
    p.core.balanced.style = BalancedCoreStyle.ONE_SIDED
    p.core.balanced.subtract_current_in_xbar = False       # each column of a pair its ADC
    p.core.weight_bits = 8
    p.core.rows_max, p.core.cols_max = rows, 4096
    p.core.mapping.weights.min, p.core.mapping.weights.max = -127.0, 127.0
    p.xbar.device.cell_bits = r.cell_bits
    p.xbar.device.infinite_on_off_ratio = True     # a zero weight is a zero current
    p.xbar.dac.mvm.model = "SignMagnitudeDAC"
    p.xbar.dac.mvm.signed = True
    p.xbar.dac.mvm.bits = 8
    p.core.mapping.inputs.mvm.min, p.core.mapping.inputs.mvm.max = -float(XMAX), float(XMAX)
    if r.dac_bits:          # a bit of the input's magnitude per cycle, each read by the ADC
        p.xbar.dac.mvm.input_bitslicing = True
        p.xbar.dac.mvm.slice_size = r.dac_bits
        p.xbar.adc.mvm.adc_per_ibit = True
    p.xbar.adc.mvm.model = "SignMagnitudeADC"
    p.xbar.adc.mvm.signed = True
    p.xbar.adc.mvm.bits = r.adc_bits
    p.xbar.adc.mvm.adc_range_option = ADCRangeLimits.CALIBRATED
    pairs = 2 if r.weight_scheme == "differential" else 1
    cell = (1 << r.cell_bits) - 1
    # a slice's output in CrossSim's units: (x / 127) . (w_slice / (2^c - 1)), or with the
    # input fed bit by bit, (its bit, signed) . (w_slice / (2^c - 1))
    unit = cell * (1 if r.dac_bits else XMAX)
    top = (1 << (r.adc_bits - 1)) - 1
    p.xbar.adc.mvm.calibrated_range = np.array(
        [[-top * 2.0 ** e / unit, top * 2.0 ** e / unit] for e in shifts[::pairs]])
    p.validate()
    core = AnalogCore(w.astype(np.float64), p)
    return np.asarray(core.matvec(x.astype(np.float64)), np.float64)


class Readings:
    """CrossSim's ADC conversions while it runs: (input, output, step), in integer units."""

    def __init__(self, unit):
        from simulator.circuits.adc.quantizer_adc import SignMagnitudeADC
        self.cls, self.unit, self.seen = SignMagnitudeADC, unit, []
        self.convert = SignMagnitudeADC.convert

    def __enter__(self):
        outer = self

        def convert(adc, vector):
            before = np.array(vector, np.float64, copy=True)
            after = outer.convert(adc, vector)
            step = 2 * adc.max / (adc.levels - 1) * outer.unit
            outer.seen.append((before * outer.unit, np.asarray(after) * outer.unit, step))
            return after
        self.cls.convert = convert
        return self

    def __exit__(self, *exc):
        self.cls.convert = self.convert


def compare_readings(seen, bits):
    """(readings, ties, mismatches): each CrossSim reading against our ADC on the same
    column sum; a tie (the sum halfway between two codes) may differ by one step."""
    count = ties = bad = 0
    for y, got, step in seen:
        y = np.rint(y).astype(np.int64)
        e = int(round(np.log2(step)))
        want = readout.adc(y, e, bits).astype(np.float64)
        tie = (y % (1 << e) == (1 << (e - 1))) if e else np.zeros(y.shape, bool)
        off = np.abs(got - want)
        count += y.size
        ties += int(np.sum(tie & (off > 1e-6)))
        bad += int(np.sum((off > 1e-6) & ~(tie & (np.abs(off - step) < 1e-6))))
    return count, ties, bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--crosssim", required=True, help="a checkout of sandialabs/cross-sim")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.crosssim))
    rng = np.random.default_rng(args.seed)
    configs = list(itertools.product((1, 2, 4), (0, 1), (4, 6, 8), ("differential", "offset"),
                                     ((64, 1), (64, 4), (128, 2))))
    print(f"{'cells':>5} {'DAC':>4} {'ADC':>4} {'weights':<12} {'rows x arrays':>13} "
          f"{'outputs':>8} {'max diff':>9} {'same':>6} {'readings':>9} {'ties':>6} {'wrong':>6}")
    bad = 0
    for cell, dac, adc_bits, scheme, (rows, arrays) in configs:
        r = Readout(cell, dac, adc_bits, scheme)
        w = rng.integers(-127, 128, (rows * arrays, 24)).astype(np.int8)
        w_t = np.ascontiguousarray(w.T)     # CrossSim's matrix is [outputs, inputs]
        shifts = shared_shifts(w, rows, r)
        pairs = 2 if scheme == "differential" else 1
        top_step = 2.0 ** (max(shifts) + cell * (len(weight_slices(w, 8, r)) // pairs - 1))
        diffs, readings = [], Readings(((1 << cell) - 1) * (1 if dac else XMAX))
        for _ in range(4):
            x = rng.integers(-XMAX, XMAX + 1, rows * arrays).astype(np.int8)
            with readings:
                got = crosssim(x, w_t, rows, r, shifts)
            want = ours(x, w, rows, r, shifts).astype(np.float64)
            diffs.append(np.abs(got - want) / top_step)
        d = np.concatenate(diffs)
        count, ties, wrong = compare_readings(readings.seen, adc_bits)
        bad += wrong > 0
        print(f"{cell:>5} {dac:>4} {adc_bits:>4} {scheme:<12} {f'{rows} x {arrays}':>13} "
              f"{d.size:>8} {d.max():>9.3f} {np.mean(d < 1e-9):>6.1%} {count:>9} {ties:>6} "
              f"{wrong:>6}")
    print(f"{len(configs) - bad} of {len(configs)} configurations: every ADC reading CrossSim's "
          f"(a tie, a sum halfway between two codes, either one)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
