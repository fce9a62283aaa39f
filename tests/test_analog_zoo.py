"""The CI-sized part of the analog read-out sweep (tools/analog_zoo.py): a zoo model at int8
on the 6-bit-ADC preset, with the ADC and 16-bit searches and what they cost on the chip."""
import analog_zoo


def test_a_model_on_six_bit_adcs_reaches_the_cosine_and_says_what_it_cost(zoo_dir, tmp_path):
    row = analog_zoo.analog_model("ocr_head", zoo_dir, str(tmp_path), "npu256-analog", 8, 0.999)
    assert "error" not in row, row
    # 6-bit ADCs lose against ideal arrays; the searches then reach the bound
    assert row["chip_cosine"] < row["ideal_cosine"]
    # every ADC raised to 8 bits is not enough at 0.999: a few layers go to 16 bits on top,
    # which takes more arrays and more time than plain int8
    assert row["raised"] == row["layers"] and not row["reached"] and row["after"] < 0.999
    assert row["hp_reached"] and row["hp_after"] >= 0.999 and 0 < row["int16"] < row["layers"]
    cost = row["cost"]
    assert cost["arrays"][1] > cost["arrays"][0] > 0
    assert cost["latency_ns"][1] > cost["latency_ns"][0] > 0
    assert row["model"] in analog_zoo.render([row], 0.999)
