#!/usr/bin/env python3
"""serve8 against HF transformers on seeded random-weight Llamas (run on the GPU machine).

  hf_compare.py build CONFIG_JSON LAYERS DIR   HF builds the model from CONFIG_JSON with LAYERS
                                               layers and seeded random weights, saves it to DIR
                                               (save_pretrained, bf16) with DIR/prompts.txt
  hf_compare.py compare DIR SERVE8_PREFIX      compares the logits and greedy ids serve8 wrote
                                               (serve8 dump-logits --output SERVE8_PREFIX) with
                                               transformers' own, prints a report and writes
                                               SERVE8_PREFIX.compare.json

The reference is transformers in fp32 over the same bf16 weights. "bf16 noise" is measured, not
assumed: transformers' own bf16 run is compared with the same reference, and serve8's differences
are reported next to it.
"""
import json
import pathlib
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference is true fp32
torch.backends.cudnn.allow_tf32 = False

PROMPT_LENS = [17, 40, 64, 100, 129, 200]


def build(config_json, layers, out):
    out = pathlib.Path(out)
    cfg = json.load(open(config_json))
    cfg["num_hidden_layers"] = int(layers)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    model.to(torch.bfloat16).save_pretrained(out)
    rng = np.random.default_rng(0)
    with open(out / "prompts.txt", "w") as f:
        for n in PROMPT_LENS:
            f.write(" ".join(str(int(t)) for t in rng.integers(3, cfg["vocab_size"], n)) + "\n")


def lead(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(model_dir, prefix):
    model_dir = pathlib.Path(model_dir)
    mine = np.load(prefix + ".npy")  # [prompts, D + 1, vocab]
    meta = json.load(open(prefix + ".json"))
    prompts = [list(map(int, l.split())) for l in open(model_dir / "prompts.txt") if l.strip()]
    g = len(meta["prompts"][0]["greedy_ids"])
    ref = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        m = LlamaForCausalLM.from_pretrained(model_dir, dtype=dtype).cuda().eval()
        logits, greedy = [], []
        for p, pm in zip(prompts, meta["prompts"]):
            ids = torch.tensor([p], device="cuda")
            with torch.no_grad():
                out = m(ids).logits[0].float()
                logits.append(out[pm["positions"]].cpu().numpy())
                gen = m.generate(ids, max_new_tokens=g, min_new_tokens=g, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, len(p):].tolist()
            greedy.append(gen)
        ref[name] = (np.stack(logits), greedy)
        del m
        torch.cuda.empty_cache()
    r32, g32 = ref["fp32"]
    r16, g16 = ref["bf16"]
    s8_greedy = [pm["greedy_ids"] for pm in meta["prompts"]]

    def stats(x):
        d = np.abs(x - r32)
        return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()),
                "top1_agreement": float((x.argmax(-1) == r32.argmax(-1)).mean())}

    rep = {
        "model_dir": str(model_dir),
        "rows": int(r32.shape[0] * r32.shape[1]),
        "logit_std": float(r32.std()),
        "serve8_vs_hf_fp32": stats(mine),
        "hf_bf16_vs_hf_fp32": stats(r16),
        "greedy_leading_agreement": {
            "serve8_vs_hf_fp32": [lead(a, b) for a, b in zip(s8_greedy, g32)],
            "serve8_vs_hf_bf16": [lead(a, b) for a, b in zip(s8_greedy, g16)],
            "hf_bf16_vs_hf_fp32": [lead(a, b) for a, b in zip(g16, g32)],
            "of": g,
        },
        "serve8": meta["command"],
    }
    json.dump(rep, open(prefix + ".compare.json", "w"), indent=1)
    a, b = rep["serve8_vs_hf_fp32"], rep["hf_bf16_vs_hf_fp32"]
    print(f"{model_dir.name}: {rep['rows']} logit rows (std {rep['logit_std']:.3f}) against HF fp32")
    print(f"  serve8 bf16:  max |diff| {a['max_abs_diff']:.4f}, mean {a['mean_abs_diff']:.5f}, top-1 {a['top1_agreement']:.4f}")
    print(f"  HF bf16:      max |diff| {b['max_abs_diff']:.4f}, mean {b['mean_abs_diff']:.5f}, top-1 {b['top1_agreement']:.4f}")
    ga = rep["greedy_leading_agreement"]
    print(f"  greedy leading ids equal (of {g}): serve8 vs HF fp32 {ga['serve8_vs_hf_fp32']}, "
          f"vs HF bf16 {ga['serve8_vs_hf_bf16']}; HF bf16 vs fp32 {ga['hf_bf16_vs_hf_fp32']}")


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(*sys.argv[2:5])
    elif sys.argv[1] == "compare":
        compare(*sys.argv[2:4])
    else:
        sys.exit(__doc__)
