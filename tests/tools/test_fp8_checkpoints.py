"""FP8 checkpoints as llm-compressor, FBGEMM, vLLM/HF and ModelOpt write them, loaded on the CPU.

A small random Llama is written in fp32, then as each FP8 format with numpy, ml_dtypes and
safetensors. Per-channel codes made by the formula `--quantization fp8` uses (amax / 448 per output
channel) must give exactly the logits of the fp32 checkpoint quantized at load; per-tensor scales
exactly those of the same codes with the scale repeated per channel. Weight-only checkpoints (no
input quantization) must give the logits of the fp32 model holding the dequantized weights."""

import json
import os
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

BIN = os.environ.get("SERVE8_BIN", "serve8")
E4M3 = ml_dtypes.float8_e4m3fn
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
          "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 1,
          "eos_token_id": 2}
MATRICES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
            "mlp.up_proj", "mlp.down_proj")


def dense_weights():
    rng = np.random.default_rng(3)
    h, i, q, kv, v = 64, 128, 64, 32, 256
    w = {"model.embed_tokens.weight": rng.normal(0, 1, (v, h)), "model.norm.weight": 1 + rng.normal(0, 0.05, h),
         "lm_head.weight": rng.normal(0, h ** -0.5, (v, h))}
    shapes = {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
              "self_attn.o_proj": (h, q), "mlp.gate_proj": (i, h), "mlp.up_proj": (i, h), "mlp.down_proj": (h, i)}
    for layer in range(2):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.05, h)
        w[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.05, h)
        for m, s in shapes.items():
            # Rows of different magnitudes, so per-channel and per-tensor scales differ.
            w[p + m + ".weight"] = rng.normal(0, s[1] ** -0.5, s) * rng.uniform(0.2, 3.0, (s[0], 1))
    return {k: np.ascontiguousarray(a, dtype=np.float32) for k, a in w.items()}


def quantize(a, per_channel):
    """serve8's formula: codes = e4m3(a * (448 / amax)), scale = amax / 448, in fp32."""
    amax = np.abs(a).max(axis=1, keepdims=True) if per_channel else np.abs(a).max(keepdims=True)
    amax = amax.astype(np.float32)
    codes = (a * (np.float32(448.0) / amax)).astype(E4M3)
    return codes, (amax / np.float32(448.0)).astype(np.float32)


def write(d, tensors, quantization_config=None, extra_files=None):
    d.mkdir(parents=True)
    cfg = dict(CONFIG)
    if quantization_config is not None:
        cfg["quantization_config"] = quantization_config
    (d / "config.json").write_text(json.dumps(cfg))
    for name, text in (extra_files or {}).items():
        (d / name).write_text(text)
    save_file(tensors, str(d / "model.safetensors"))
    return d


def fp8_tensors(dense, per_channel, scale_shape, extra=None):
    out = {}
    for name, a in dense.items():
        if any(f".{m}.weight" in name for m in MATRICES):
            codes, scale = quantize(a, per_channel)
            out[name] = codes
            out[name + "_scale"] = scale.reshape(scale_shape(a))
            for suffix, value in (extra or {}).items():
                out[name[: -len("weight")] + suffix] = np.array(value, dtype=np.float32)
        else:
            out[name] = a
    return out


def logits(model, tmp_path, *args):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("1 5 9 200 31 7 77 3 18 40 100 250\n1 42 42 42 17 99\n")
    prefix = tmp_path / ("out_" + model.name + "_".join(args).replace("-", ""))
    r = subprocess.run([BIN, "dump-logits", "--device", "cpu", "--model-path", str(model), "--prompts-file",
                        str(prompts), "--decode-tokens", "4", "--output", str(prefix), *args],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return np.load(str(prefix) + ".npy"), r.stderr


COMPRESSED = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
              "config_groups": {"group_0": {"targets": ["Linear"],
                                            "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                        "symmetric": True, "dynamic": False},
                                            "input_activations": {"num_bits": 8, "type": "float",
                                                                  "strategy": "token", "dynamic": True}}}}


# Weight-only FP8 (vLLM's W8A16 scheme): no input_activations, the GEMMs' inputs stay unquantized.
WEIGHT_ONLY = json.loads(json.dumps(COMPRESSED))
del WEIGHT_ONLY["config_groups"]["group_0"]["input_activations"]


def dequantized(dense):
    """The fp32 checkpoint whose matrices hold exactly the per-channel codes times their scales."""
    out = {}
    for name, a in dense.items():
        if any(f".{m}.weight" in name for m in MATRICES):
            codes, scale = quantize(a, True)
            a = codes.astype(np.float32) * scale
        out[name] = a
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8")
    dense = dense_weights()
    per_tensor_ct = json.loads(json.dumps(COMPRESSED))
    per_tensor_ct["config_groups"]["group_0"]["weights"]["strategy"] = "tensor"
    per_tensor = fp8_tensors(dense, False, lambda a: (), {"input_scale": 0.05})
    # The same per-tensor codes with the scale written once per channel: the reference for them.
    repeated = {k: (np.repeat(v.reshape(1, 1), dense[k[: -len("_scale")]].shape[0], axis=0)
                    if k.endswith("weight_scale") else v) for k, v in per_tensor.items() if not k.endswith("input_scale")}
    return {
        "dense": write(root / "dense", dense),
        "compressed": write(root / "compressed", fp8_tensors(dense, True, lambda a: (a.shape[0], 1)), COMPRESSED),
        "fbgemm": write(root / "fbgemm", fp8_tensors(dense, True, lambda a: (a.shape[0], 1)),
                        {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                         "modules_to_not_convert": ["lm_head"]}),
        "modelopt": write(root / "modelopt", per_tensor, None,
                          {"hf_quant_config.json": json.dumps({"producer": {"name": "modelopt"},
                                                               "quantization": {"quant_algo": "FP8",
                                                                                "exclude_modules": ["lm_head"]}})}),
        "fp8_static": write(root / "fp8_static", per_tensor, {"quant_method": "fp8", "activation_scheme": "static"}),
        "per_tensor_ct": write(root / "per_tensor_ct", per_tensor, per_tensor_ct),
        "repeated": write(root / "repeated", repeated, COMPRESSED),
        "weight_only": write(root / "weight_only", fp8_tensors(dense, True, lambda a: (a.shape[0], 1)), WEIGHT_ONLY),
        "dequantized": write(root / "dequantized", dequantized(dense)),
    }


def test_per_channel_checkpoints_equal_quantization_at_load(models, tmp_path):
    want, _ = logits(models["dense"], tmp_path, "--quantization", "fp8")
    dense, _ = logits(models["dense"], tmp_path)
    assert not np.array_equal(want, dense), "--quantization fp8 changed nothing"
    for name in ("compressed", "fbgemm"):
        got, log = logits(models[name], tmp_path)
        assert "FP8 checkpoint" in log, log[-1000:]
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_per_tensor_checkpoints_equal_their_scale_per_channel(models, tmp_path):
    want, _ = logits(models["repeated"], tmp_path)
    dense, _ = logits(models["dense"], tmp_path)
    for name in ("modelopt", "fp8_static", "per_tensor_ct"):
        got, _ = logits(models[name], tmp_path)
        np.testing.assert_array_equal(got, want, err_msg=name)
    # And as near the fp32 weights as per-channel scales get: e4m3's relative precision does not
    # depend on the scale, so one scale per tensor costs little where no row falls to subnormals.
    per_channel, _ = logits(models["dense"], tmp_path, "--quantization", "fp8")
    err = np.linalg.norm(want - dense) / np.linalg.norm(dense)
    err_pc = np.linalg.norm(per_channel - dense) / np.linalg.norm(dense)
    print(f"FP8 logits against fp32: relative error {err:.4f} per tensor, {err_pc:.4f} per channel")
    assert 1e-4 < err < 1.5 * err_pc


def test_weight_only_checkpoints_keep_the_inputs_unquantized(models, tmp_path):
    # The e4m3 weights with exact inputs are the dequantized fp32 model up to where the scale is
    # applied (to each sum, not to each weight): fp32 rounding, far below e4m3 inputs' error.
    got, log = logits(models["weight_only"], tmp_path)
    assert "weight-only" in log, log[-1000:]
    want, _ = logits(models["dequantized"], tmp_path)
    w8a8, _ = logits(models["compressed"], tmp_path)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    err_w8a8 = np.linalg.norm(w8a8 - want) / np.linalg.norm(want)
    print(f"logits against the dequantized fp32 model: weight-only {err:.2e}, inputs per token {err_w8a8:.2e}")
    assert err < 1e-5 and err_w8a8 > 1e-3


def convert(model, out, *args):
    r = subprocess.run([BIN, "convert", "fp8", "--model-path", str(model), "--output", str(out), *args],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_convert_rtn_writes_what_quantization_at_load_computes(models, tmp_path):
    out = convert(models["dense"], tmp_path / "rtn", "--method", "rtn")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"
    got, log = logits(out, tmp_path)
    assert "FP8 checkpoint" in log, log[-1000:]
    want, _ = logits(models["dense"], tmp_path, "--quantization", "fp8")
    np.testing.assert_array_equal(got, want)


def test_convert_gptq_lands_nearer_the_dense_model(models, tmp_path):
    # Calibration: random ids (the checkpoint has no tokenizer), 32 documents of 64.
    rng = np.random.default_rng(5)
    ids = tmp_path / "calib.txt"
    ids.write_text("".join(" ".join(str(t) for t in rng.integers(3, 256, 64)) + "\n" for _ in range(32)))
    out = convert(models["dense"], tmp_path / "gptq", "--calibration-ids", str(ids), "--context", "64")
    assert json.loads((out / "config.json").read_text())["quantization_config"]["serve8"]["rounding"] == "gptq"
    dense, _ = logits(models["dense"], tmp_path)
    rtn, _ = logits(models["dense"], tmp_path, "--quantization", "fp8")
    gptq, _ = logits(out, tmp_path)
    err_rtn, err_gptq = np.linalg.norm(rtn - dense), np.linalg.norm(gptq - dense)
    print(f"logits against fp32: rounding to nearest {err_rtn:.4f}, GPTQ {err_gptq:.4f}")
    assert err_gptq < 0.9 * err_rtn
    # --activations names the scheme in config.json and nothing else: the accuracy scripts score
    # both schemes on one conversion's tensors.
    none = convert(models["dense"], tmp_path / "gptq_none", "--calibration-ids", str(ids), "--context", "64",
                   "--activations", "none")
    assert (none / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


def test_convert_writes_weight_only_checkpoints_and_the_sources_dtype(models, tmp_path):
    out = convert(models["dense"], tmp_path / "w8a16", "--method", "rtn", "--activations", "none")
    group = json.loads((out / "config.json").read_text())["quantization_config"]["config_groups"]["group_0"]
    assert group["input_activations"] is None
    got, _ = logits(out, tmp_path)
    want, _ = logits(models["weight_only"], tmp_path)
    np.testing.assert_array_equal(got, want)
    # A bf16 checkpoint's unquantized tensors stay bf16 (an fp32 copy would double the embeddings).
    bf16 = {k: v.astype(ml_dtypes.bfloat16) for k, v in dense_weights().items()}
    src = write(tmp_path / "bf16", bf16)
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(dict(cfg, torch_dtype="bfloat16")))
    out = convert(src, tmp_path / "bf16_fp8", "--method", "rtn")
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    with open(out / "model.safetensors", "rb") as f:  # the header: numpy cannot load F8_E4M3
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert header["model.embed_tokens.weight"]["dtype"] == "BF16"
    assert header["model.layers.0.mlp.down_proj.weight"]["dtype"] == "F8_E4M3"


@pytest.mark.parametrize("qc, needle", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "block-wise"),
    ({"quant_method": "awq", "bits": 4}, "'awq' is not supported"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int",
                                                                               "strategy": "group"}}}}, "4-bit int"),
    ({"quant_method": "compressed-tensors", "config_groups": {
        "a": COMPRESSED["config_groups"]["group_0"], "b": WEIGHT_ONLY["config_groups"]["group_0"]}},
     "disagree on input_activations"),
])
def test_unsupported_quantization_is_refused_by_name(tmp_path, qc, needle):
    d = write(tmp_path / "m", dense_weights(), qc)
    (tmp_path / "p.txt").write_text("1 2 3 4 5 6 7 8 9 10 11 12\n")
    r = subprocess.run([BIN, "dump-logits", "--device", "cpu", "--model-path", str(d), "--prompts-file",
                        str(tmp_path / "p.txt"), "--output", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode != 0
    assert needle in r.stderr + r.stdout, (r.stderr + r.stdout)[-1500:]
