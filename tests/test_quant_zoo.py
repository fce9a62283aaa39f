"""The CI-sized part of the integer-flow sweep (tools/quant_zoo.py): every model family of the
zoo at a small size, each step run as `paddle-npu` runs for a user (convert at batch 1,
calibrate on 32 samples, lower at int8 / int8 per-channel / int16 and verify, quant-report,
--qdq, and --hp-until-cosine where int8 misses 0.99)."""
import os

import numpy as np
import pytest

import quant_zoo
import zoo

FAMILIES = ["lenet", "mobilenet_v3_small", "transformer_encoder", "lstm", "gru", "tiny_bert",
            "ocr_head", "det_head", "ppocrv4_det_mobile_160", "picodet_s_160",
            "pp_liteseg_t_128", "segformer_b0_128", "svtr_tiny", "crnn", "vit_tiny_64",
            "gpt_decoder", "control_flow", "swin_narrow", "slanet_plus_128",
            "ppocrv5_rec_mobile_48x96", "uvdoc_176x120", "pp_formulanet_s_96",
            "pp_doclayout_v2_160"]
MIN_COSINE = 0.99


def test_the_families_are_zoo_models_at_small_sizes():
    for name in FAMILIES:
        assert name in zoo.MODELS
        # an image of at most 224x224 pixels (the least a Swin's 7x7 windows at 1/32 take)
        for i in zoo.MODELS[name].inputs:
            assert np.prod([d or 1 for d in i.shape[2:]]) <= 224 * 224, name


def test_deploy_set_drops_the_small_copies():
    deploy = quant_zoo.deploy_models()
    assert "ppocrv4_det_mobile" in deploy and "ppocrv4_det_mobile_160" not in deploy
    assert "vit_tiny" in deploy and "vit_tiny_64" not in deploy
    assert "lenet" in deploy and "swin_narrow" in deploy


def test_a_failed_step_and_a_disagreement_are_failures():
    row = {"model": "m", "int8_cosine": 0.5,
           "steps": {"convert": {"rc": 0, "s": 1, "mib": 1},
                     "int8": {"rc": 0, "s": 1, "mib": 1},
                     "int8.verify": {"rc": 1, "s": 1, "mib": 1, "ok": False},
                     "qdq": {"rc": 2, "s": 1, "mib": 1, "error": "boom"}}}
    assert [k for k, _ in quant_zoo.failures(row)] == ["qdq", "int8.verify"]
    # int8 below the bound is made good by a 16-bit promotion that verifies
    row["steps"]["hp.verify"] = {"rc": 0, "s": 1, "mib": 1, "ok": True}
    row["hp_cosine"] = 0.995
    assert [k for k, _ in quant_zoo.failures(row)] == ["qdq"]


@pytest.mark.parametrize("name", FAMILIES)
def test_the_integer_flow_runs_clean(zoo_dir, tmp_path, name):
    row = quant_zoo.sweep_model(name, zoo_dir, str(tmp_path), 32, {8, 16}, MIN_COSINE,
                                "npu256")
    assert quant_zoo.failures(row) == [], quant_zoo.render([row])
    assert row["int16_cosine"] >= MIN_COSINE
    assert max(row["int8_cosine"], row.get("hp_cosine") or 0) >= MIN_COSINE


@pytest.mark.parametrize("name,mean,std", [
    ("uvdoc_176x120", "0,0,0", "255,255,255"),          # pixels / 255, as PaddleX feeds it
    ("rtdetr_r18vd_160", "123.675,116.28,103.53", "58.395,57.12,57.375")])
def test_images_are_made_as_the_model_preprocesses_them(tmp_path, name, mean, std):
    """The sweep calibrates an image model on a folder of pictures, telling `calibrate` the
    model's own preprocessing (Model.pixels), and verifies it on pictures made the same way:
    UVDoc's inputs are pixels in 0..1 (ImageNet's normalisation made its grid leave the
    image, and its output all padding)."""
    from PIL import Image

    model = zoo.MODELS[name]
    calib, tune, _, one = quant_zoo.make_data(model, str(tmp_path), 4)
    assert calib[calib.index("--mean") + 1] == mean and calib[calib.index("--std") + 1] == std
    folder = calib[calib.index("--data") + 1]
    m, s = (np.array([float(c) for c in v.split(",")]).reshape(1, 3, 1, 1) for v in (mean, std))
    pictures = np.stack([np.asarray(Image.open(os.path.join(folder, f)))
                         for f in sorted(os.listdir(folder))]).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(np.load(tune)["x"], (pictures - m) / s, atol=1e-5)
    pixels = np.load(one)["in_x"] * s / 255 + m / 255
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6 and pixels.std() > 0.1


def test_a_skipped_plan_is_shown_skipped_not_failed():
    ok = {"rc": 0, "s": 1, "mib": 1}
    row = {"model": "m", "int8_cosine": 0.999, "skipped": ["int8pc"],
           "steps": {"convert": ok, "int8": ok, "int8.verify": dict(ok, ok=True)}}
    line = quant_zoo.render([row]).splitlines()[1].split()
    assert line[quant_zoo.STEPS.index("int8pc") + 1] == "skipped"
    assert line[quant_zoo.STEPS.index("int16") + 1] == "-"
    assert quant_zoo.failures(row) == []


@pytest.mark.parametrize("name", ["mobilenet_v3_small", "lstm", "pp_lcnet_textline_ori"])
def test_calibration_data_is_not_what_the_zoo_normalised_or_tests_on(tmp_path, name):
    """Ranges calibrated on the batch BatchNorm statistics were set on clip a new input (a
    seeded network is normalised on exactly those inputs): the sweep calibrates on others,
    and evaluates on others again (photo-like images for a vision model, noise otherwise)."""
    import numpy as np

    model = zoo.MODELS[name]
    _, tune, evaluation, one = quant_zoo.make_data(model, str(tmp_path), 8)
    calib, held = np.load(tune), np.load(evaluation)
    normalised_on = zoo._make_inputs(model, model.seed + 1, batch=8)

    def same(a, b):     # an image written as 8-bit pixels and read back is the same image
        return np.corrcoef(a[:1].ravel(), b[:1].ravel())[0, 1] > 0.9

    for key in calib.files:
        others = [normalised_on[key], zoo.test_inputs(name)[key], held[key]]
        assert not any(same(calib[key], o) for o in others), key
        assert not same(held[key], normalised_on[key]), key


def test_a_steps_peak_memory_is_its_own_not_the_sweeps(tmp_path):
    # Linux counts the memory a process had when it forked into its child's peak RSS; the
    # sweep holds models and onnxruntime sessions, so it must not be the steps' parent
    held = np.ones(400 * 2 ** 20, np.uint8)  # 400 MiB resident in this process
    rc, _, mib, text = quant_zoo.run(["--help"], str(tmp_path / "help.log"))
    assert rc == 0 and "usage" in text and held.sum() == held.size
    assert mib < 200, mib
