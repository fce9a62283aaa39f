"""A Paddle model that is already quantised: Paddle's own post-training quantisation of the
example digits CNN, as users get such models from PaddleSlim.

    python tools/ptq_example.py [--model examples/digits_cnn/legacy] [--out DIR]
                                [--format onnx|fake]

Runs paddle.static.quantization.PostTrainingQuantization (legacy static mode; abs_max
activation thresholds from 256 train images, channel-wise abs_max weights) in either of
PaddleSlim's formats: `onnx` (quantize_linear / dequantize_linear ops, int8 weights in the
params file) or the older `fake` (fake_quantize_range_abs_max before each layer, integer-valued
float weights, fake_channel_wise_dequantize_max_abs after it), and writes
DIR/model.pdmodel + model.pdiparams and DIR/reference_io.npz: the test split (`in_x`), the
quantised model's outputs run by Paddle (`out_0`), the labels, and `near_tie`: the images for
which some quantiser after the first gets a value within NEAR_TIE steps of a half step.

Float noise decides those: Paddle's float layers between quantisers (BatchNorm, pooling, the
dequantiser's multiply) and any other correct implementation of them differ by a few ulps, and
a value that close to a half step may round either way, moving the output by a whole step of
a later layer (0.07 on outputs of magnitude 25 for this model). Measured on the committed
fixture: onnxruntime on our conversion and Paddle differ by at most 4e-5 steps at every
quantiser, so NEAR_TIE is five times that. Tests compare the rest exactly.

The fixtures under tests/data/paddleslim_ptq/ were made once with this tool: Paddle's PTQ
itself differs between CPUs (its calibration runs Paddle's float kernels), so tests read the
committed files rather than quantising again.
"""
import argparse
import os
import sys

os.environ["FLAGS_enable_pir_api"] = "0"     # before paddle: the legacy program format

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))


NEAR_TIE = 2e-4      # in quantisation steps; see the module docstring


def near_tie_samples(prog, exe, feed, x):
    """A boolean per sample of x: does some quantiser whose input a float layer computes get a
    value within NEAR_TIE steps of a half step? Paddle forms bin/s and multiplies by it; the
    first quantiser reads the model input, which no float noise reaches."""
    import paddle

    scope = paddle.static.global_scope()
    quantisers = [op for op in prog.global_block().ops
                  if op.type.startswith("fake_quantize") or op.type == "quantize_linear"]
    quantisers = [op for op in quantisers if op.input("X")[0] != feed]
    values = exe.run(prog, feed={feed: x}, fetch_list=[op.input("X")[0] for op in quantisers])
    near = np.zeros(len(x), bool)
    for op, v in zip(quantisers, values):
        if v.shape[:1] != (len(x),):          # a constant the program quantises (a bias)
            continue
        scale_slot = "InScale" if "InScale" in op.input_names else "Scale"
        s = np.asarray(scope.find_var(op.input(scale_slot)[0]).get_tensor(), np.float32)
        steps = np.abs(v * (np.float32(2 ** (op.attr("bit_length") - 1) - 1) / s))
        dist = np.abs(steps - np.floor(steps) - 0.5)
        near |= (dist < NEAR_TIE).reshape(len(x), -1).any(1)
    return near


def quantize(model_dir, out_dir, samples=256, batch=32, fmt="onnx"):
    import paddle
    from paddle.static.quantization import PostTrainingQuantization
    from train_example import load_digits_split

    paddle.enable_static()
    (xtr, _), _ = load_digits_split()
    exe = paddle.static.Executor(paddle.CPUPlace())
    ptq = PostTrainingQuantization(
        executor=exe, model_dir=model_dir, model_filename="model.pdmodel",
        params_filename="model.pdiparams",
        data_loader=lambda: ({"x": xtr[i:i + batch]} for i in range(0, samples, batch)),
        batch_size=batch, batch_nums=samples // batch, algo="abs_max",
        onnx_format=fmt == "onnx",
        quantizable_op_type=["conv2d", "matmul_v2"],
        weight_quantize_type="channel_wise_abs_max")
    ptq.quantize()
    ptq.save_quantized_model(out_dir, model_filename="model.pdmodel",
                             params_filename="model.pdiparams")
    ref = np.load(os.path.join(os.path.dirname(model_dir.rstrip("/")), "reference_io.npz"))
    prog, feeds, fetch = paddle.static.load_inference_model(os.path.join(out_dir, "model"), exe)
    out = exe.run(prog, feed={feeds[0]: ref["in_x"]}, fetch_list=fetch)[0]
    near = near_tie_samples(prog, exe, feeds[0], ref["in_x"])
    np.savez(os.path.join(out_dir, "reference_io.npz"), in_x=ref["in_x"], out_0=out,
             labels=ref["labels"], near_tie=near)
    return float((out.argmax(1) == ref["labels"]).mean()), int(near.sum())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "examples", "digits_cnn", "legacy"))
    ap.add_argument("--out", default="digits_ptq")
    ap.add_argument("--format", choices=("onnx", "fake"), default="onnx")
    args = ap.parse_args(argv)
    acc, near = quantize(os.path.abspath(args.model), os.path.abspath(args.out), fmt=args.format)
    print(f"quantised by Paddle: test accuracy {acc:.4f}; {near} test images have a quantiser "
          f"input within {NEAR_TIE} steps of a half step; wrote {args.out}")


if __name__ == "__main__":
    main()
