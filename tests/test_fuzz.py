"""Malformed files: every truncation point and random byte flips give PaddleFormatError or a
read that completes, never another exception."""
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLE, REAL_MODELS
from paddle_npu import PaddleFormatError
from paddle_npu.frontend.legacy import read_legacy_program
from paddle_npu.frontend.params import param_order
from paddle_npu.frontend.params import name_records, parse_records

PDMODEL = os.path.join(EXAMPLE, "legacy", "model.pdmodel")
PDIPARAMS = os.path.join(EXAMPLE, "legacy", "model.pdiparams")
OLD_DIR = os.path.join(REAL_MODELS, "luotao1_example_mlp")   # a 1.4 KB __model__


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_legacy_pair(model_bytes, params_bytes):
    return read_params(read_legacy_program(model_bytes, PDMODEL), params_bytes)


def read_params(program, params_bytes):
    order = param_order(program)
    expected = {n: (program.var(n).dtype, program.var(n).shape) for n in order if program.var(n)}
    program.params = name_records(parse_records(params_bytes, PDIPARAMS), order, PDIPARAMS, expected)
    return program


def _assert_clean(fn, *args):
    try:
        fn(*args)
    except PaddleFormatError as exc:
        assert exc.path  # every error names the file
        return "error"
    return "read"


def test_every_truncation_of_pdmodel():
    model = _bytes(os.path.join(OLD_DIR, "__model__"))
    order = param_order(read_legacy_program(model, OLD_DIR))
    # Its per-parameter files concatenated in Paddle's order make the __params__ layout.
    params = b"".join(_bytes(os.path.join(OLD_DIR, n)) for n in order)
    outcomes = [_assert_clean(read_legacy_pair, model[:n], params) for n in range(len(model))]
    assert outcomes[0] == "error"
    # Truncating a protobuf at a field boundary can leave a valid, shorter program; the
    # params file then no longer matches it, so nearly every cut must be refused.
    assert outcomes.count("error") > 0.99 * len(model)


def test_every_truncation_of_pdiparams():
    program, params = read_legacy_program(_bytes(PDMODEL), PDMODEL), _bytes(PDIPARAMS)
    for n in range(len(params)):
        with pytest.raises(PaddleFormatError) as err:
            read_params(program, params[:n])
        assert "byte" in str(err.value) or "holds" in str(err.value)


FLIPS = settings(max_examples=1500, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])


@FLIPS
@given(st.data())
def test_byte_flips_in_pdmodel(data):
    model = bytearray(_bytes(PDMODEL))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(model) - 1))
        model[i] = data.draw(st.integers(0, 255))
    _assert_clean(read_legacy_pair, bytes(model), _bytes(PDIPARAMS))


@FLIPS
@given(st.data())
def test_byte_flips_in_pdiparams(data):
    params = bytearray(_bytes(PDIPARAMS))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(params) - 1))
        params[i] = data.draw(st.integers(0, 255))
    _assert_clean(read_legacy_pair, _bytes(PDMODEL), bytes(params))
