"""kvcodec.calibrate on tensors against `kvcodec calibrate` on the same model and tokens: the KV of
each window comes out of the C++ side as the engine cached it (as a user's engine hands it over),
and the fit's choices, coded ratios and held-back errors must agree with the command's."""

import json

import numpy as np
import pytest

import kvcodec

from conftest import ROOT, cli

# kvh32: 4 layers, 2 KV heads of 32, trained at 128 tokens: a calibration takes seconds.
MODEL = ROOT / "models" / "kvh32" / "kvh32.gguf"
STREAM_TOKENS = 2000


def model_rope(model):
    """The RoPE `kvcodec tokenize --json` reports for a GGUF model, as a user passes their model's."""
    return kvcodec.Rope(base=model["rope_freq_base"], style=model["rope_type"], n_rot=model["rope_n_rot"],
                        freq_scale=model["rope_freq_scale"])


@pytest.fixture(scope="module")
def windows(tmp_path_factory):
    """(model info, stream, samples): the windows `kvcodec calibrate` prefills (BOS + window - 1
    tokens of the text, each from position 0), prefilled by `kvcodec encode` and decoded here."""
    tmp = tmp_path_factory.mktemp("calib")
    text = MODEL.parent / "calib.txt"
    info = json.loads(cli("tokenize", "--model", MODEL, "--json", "--no-bos", text).stdout)
    with_bos = [int(t) for t in cli("tokenize", "--model", MODEL, text).stdout.split()]
    stream = info["tokens"][:STREAM_TOKENS]
    assert with_bos[1:len(stream) + 1] == stream
    window = info["model"]["n_ctx_train"]
    body = window - 1
    samples = []
    for w in range(len(stream) // body):
        ids = tmp / f"w{w}.ids"
        ids.write_text(" ".join(map(str, [with_bos[0]] + stream[w * body:(w + 1) * body])) + "\n")
        out = tmp / f"w{w}.kvc"
        cli("encode", "--model", MODEL, "--token-file", ids, "--codec", "raw", "-o", out)
        k, v = kvcodec.decode(out.read_bytes())
        assert k.shape == (info["model"]["n_layers"], window, info["model"]["n_kv_heads"], info["model"]["head_dim"])
        samples.append((k, v))
    return info["model"], stream, samples


def test_calibration_from_tensors_agrees_with_the_command(windows, tmp_path):
    model, stream, samples = windows
    tokens = tmp_path / "calib.ids"
    tokens.write_text(" ".join(map(str, stream)) + "\n")
    cli_out = tmp_path / "cli.kvcal"
    expected = json.loads(cli("calibrate", "--model", MODEL, "--token-file", tokens, "--out", cli_out, "--no-profile",
                              "--json", "--quiet").stdout)

    cal = kvcodec.calibrate(samples, model=model["fingerprint"], rope=model_rope(model))
    got = cal.report
    assert cal.model == model["fingerprint"] and cal.keys_rope_undone
    for key in ("quantizer", "grouping", "group_size", "window", "chunk_tokens", "fit_tokens", "heldout_tokens"):
        assert got[key] == expected[key], key
    assert [r["target_ratio"] for r in got["rungs"]] == [r["target_ratio"] for r in expected["rungs"]]
    for g, e in zip(got["rungs"], expected["rungs"]):
        assert g["coded_ratio"] == pytest.approx(e["coded_ratio"], rel=0.02), g["target_ratio"]
        assert g["heldout_rel_mse"] == pytest.approx(e["heldout_rel_mse"], rel=0.1), g["target_ratio"]
    for g, e in zip(got["candidates"], expected["candidates"]):
        assert (g["quantizer"], g["grouping"], g["group_size"]) == (e["quantizer"], e["grouping"], e["group_size"])
        assert g["probe_rel_mse"] == pytest.approx(e["probe_rel_mse"], rel=0.1)

    # Saved, it is a .kvcal the command reads: a chunk kvtc encodes here decodes there.
    saved = tmp_path / "py.kvcal"
    cal.save(saved)
    assert cal.path == str(saved)
    k, v = samples[-1]
    data = kvcodec.encode(k, v, "kvtc", "16", calibration=cal)
    kvc = tmp_path / "py.kvc"
    kvc.write_bytes(data)
    cli("decode", kvc, "--calibration", saved, "-o", tmp_path / "py.state")
    assert kvcodec.Calibration.load(saved).hash == cal.hash
    # The same KV in, the same fit out: with the model's exact RoPE the two files are one.
    assert saved.read_bytes() == cli_out.read_bytes()


def test_rope_matters_and_bad_samples_raise(windows):
    model, _, samples = windows
    few = samples[:6]
    rope = model_rope(model)
    with_rope = kvcodec.calibrate(few, model=model["fingerprint"], rope=rope, grouping="layer",
                                  quantizer="token-group", group_size=16, ratios=[16])
    as_stored = kvcodec.calibrate(few, model=model["fingerprint"], rope=None, grouping="layer",
                                  quantizer="token-group", group_size=16, ratios=[16])
    assert not as_stored.keys_rope_undone
    # Keys at position 0 concentrate their variance: the same size loses less.
    assert with_rope.report["rungs"][0]["heldout_rel_mse"] < as_stored.report["rungs"][0]["heldout_rel_mse"]
    assert with_rope.report["key_variance_top8"] > as_stored.report["key_variance_top8"]

    k, v = few[0]
    with pytest.raises(kvcodec.InvalidArgumentError, match="layers"):
        kvcodec.calibrate([(k, v), (k[:, :, :1], v[:, :, :1])], rope=rope)
    with pytest.raises(kvcodec.InvalidArgumentError):
        kvcodec.calibrate([(k, v)], rope=rope)
    with pytest.raises(kvcodec.InvalidArgumentError):
        kvcodec.calibrate([(k, v), (k, v.astype(np.float32))], rope=rope)
    with pytest.raises(kvcodec.InvalidArgumentError, match="n_rot"):
        kvcodec.calibrate(few, rope=kvcodec.Rope(n_rot=3))
