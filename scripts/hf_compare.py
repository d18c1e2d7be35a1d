#!/usr/bin/env python3
"""serve8 against HF transformers on seeded random-weight Llamas (run on the GPU machine).

  hf_compare.py build CONFIG_JSON LAYERS DIR   HF builds the model from CONFIG_JSON with LAYERS
                                               layers and seeded random weights, saves it to DIR
                                               (save_pretrained, bf16) with DIR/prompts.txt, and
                                               DIR/forced.txt: each prompt followed by the 32 ids
                                               transformers (fp32) generates greedily from it
  hf_compare.py build-gguf GGUF DIR            the same for a real GGUF model: DIR gets a link to
                                               GGUF, three text prompts tokenized by transformers'
                                               GGUF tokenizer, and transformers' (fp32) greedy ids
  hf_compare.py compare DIR FREE FORCED        compares what serve8 dump-logits wrote for
                                               prompts.txt (--output FREE: its free-running greedy
                                               ids) and for forced.txt (--output FORCED,
                                               --decode-tokens 32: its logits along transformers'
                                               greedy path) with transformers' own; prints a
                                               report and writes FORCED.compare.json

The reference is transformers in fp32 over the same bf16 weights (for a GGUF: over the weights
transformers dequantizes from the same file, with the `gguf` package). "bf16 noise" is measured, not
assumed: transformers' own bf16 run is compared with the same reference, and serve8's differences
are reported next to it. Greedy ids are compared teacher-forced along the reference's greedy path
(at each of the 32 steps, is serve8's argmax the reference's id?): free-running sequences of two
correct implementations part for good at the first near-tie of a random-weight model, which says
nothing about the steps after it. Every teacher-forced disagreement is reported with the
reference's own margin between the two ids, next to the measured noise.
"""
import json
import pathlib
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference is true fp32
torch.backends.cudnn.allow_tf32 = False

PROMPT_LENS = [17, 40, 64, 100, 129, 200]
GREEDY = 32
# build-gguf's prompts: a chat turn in ChatML (SmolLM2's format), prose and code.
GGUF_PROMPTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker who",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
]


def load_hf(model_dir, dtype):
    """transformers' model in DIR: its safetensors, or the .gguf file there (dequantized at load)."""
    ggufs = sorted(pathlib.Path(model_dir).glob("*.gguf"))
    kw = {"gguf_file": ggufs[0].name} if ggufs else {}
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kw).cuda().eval()


def hf_greedy(m, prompt, n):
    """n argmax steps through transformers' KV cache. Not generate(): a model whose generation
    config names an EOS would have it masked by min_new_tokens, bending the greedy path."""
    ids, past, out = torch.tensor([prompt], device="cuda"), None, []
    with torch.no_grad():
        for _ in range(n):
            o = m(ids if past is None else ids[:, -1:], past_key_values=past, use_cache=True)
            past = o.past_key_values
            out.append(int(o.logits[0, -1].argmax()))
            ids = torch.cat([ids, torch.tensor([[out[-1]]], device="cuda")], dim=1)
    return out


def build(config_json, layers, out):
    out = pathlib.Path(out)
    cfg = json.load(open(config_json))
    cfg["num_hidden_layers"] = int(layers)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    model.to(torch.bfloat16).save_pretrained(out)
    del model
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, cfg["vocab_size"], n)] for n in PROMPT_LENS]
    ref = load_hf(out, torch.float32)  # the saved bf16 weights
    write_prompts(out, prompts, ref)


def write_prompts(out, prompts, ref):
    with open(out / "prompts.txt", "w") as f, open(out / "forced.txt", "w") as g:
        for p in prompts:
            f.write(" ".join(map(str, p)) + "\n")
            g.write(" ".join(map(str, p + hf_greedy(ref, p, GREEDY))) + "\n")


def build_gguf(gguf, out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    link = out / pathlib.Path(gguf).name
    if not link.exists():
        link.symlink_to(pathlib.Path(gguf).resolve())
    tok = AutoTokenizer.from_pretrained(out, gguf_file=link.name)
    # The text alone: SmolLM2 adds no BOS (its BOS id is <|im_start|>), whatever the conversion does.
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in GGUF_PROMPTS]
    write_prompts(out, prompts, load_hf(out, torch.float32))


def lead(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(model_dir, free_prefix, forced_prefix):
    model_dir = pathlib.Path(model_dir)
    mine = np.load(forced_prefix + ".npy")  # [prompts, GREEDY + 1, vocab]
    forced_meta = json.load(open(forced_prefix + ".json"))
    free_meta = json.load(open(free_prefix + ".json"))
    forced = [list(map(int, l.split())) for l in open(model_dir / "forced.txt") if l.strip()]
    prompts = [list(map(int, l.split())) for l in open(model_dir / "prompts.txt") if l.strip()]
    ref = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        m = load_hf(model_dir, dtype)
        logits = []
        for f, pm in zip(forced, forced_meta["prompts"]):
            with torch.no_grad():
                out = m(torch.tensor([f], device="cuda")).logits[0].float()
            logits.append(out[pm["positions"]].cpu().numpy())
        free = [hf_greedy(m, p, GREEDY) for p in prompts] if name == "bf16" else None
        ref[name] = (np.stack(logits), free)
        del m
        torch.cuda.empty_cache()
    r32 = ref["fp32"][0]
    r16, g16 = ref["bf16"]
    g32 = [f[len(p):] for f, p in zip(forced, prompts)]  # the reference's greedy ids

    def stats(x):
        d = np.abs(x - r32)
        return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()),
                "top1_agreement": float((x.argmax(-1) == r32.argmax(-1)).mean())}

    noise = stats(r16)["max_abs_diff"]
    # Teacher-forced greedy: row j of prompt i predicts the reference's greedy id j.
    forced_greedy = {"serve8": [], "hf_bf16": []}
    disagreements = []
    for who, x in (("serve8", mine), ("hf_bf16", r16)):
        for i, want in enumerate(g32):
            picks = x[i, :GREEDY].argmax(-1).tolist()
            forced_greedy[who].append(sum(int(a == b) for a, b in zip(picks, want)))
            for j, (a, b) in enumerate(zip(picks, want)):
                if a != b:
                    margin = float(r32[i, j, b] - r32[i, j, a])
                    disagreements.append({"who": who, "prompt": i, "step": j, "reference_id": b, "picked": a,
                                          "reference_margin": margin, "within_noise": margin <= 2 * noise})
    s8_free = [pm["greedy_ids"] for pm in free_meta["prompts"]]
    rep = {
        "model_dir": str(model_dir),
        "rows": int(r32.shape[0] * r32.shape[1]),
        "logit_std": float(r32.std()),
        "serve8_vs_hf_fp32": stats(mine),
        "hf_bf16_vs_hf_fp32": stats(r16),
        "teacher_forced_greedy_equal": forced_greedy,
        "teacher_forced_disagreements": disagreements,
        "free_running_leading_equal": {
            "serve8_vs_hf_fp32": [lead(a, b) for a, b in zip(s8_free, g32)],
            "serve8_vs_hf_bf16": [lead(a, b) for a, b in zip(s8_free, g16)],
            "hf_bf16_vs_hf_fp32": [lead(a, b) for a, b in zip(g16, g32)],
        },
        "of": GREEDY,
        "serve8": forced_meta["command"],
    }
    json.dump(rep, open(forced_prefix + ".compare.json", "w"), indent=1)
    a, b = rep["serve8_vs_hf_fp32"], rep["hf_bf16_vs_hf_fp32"]
    n = len(g32) * GREEDY
    print(f"{model_dir.name} ({forced_meta['command'].split(' --output')[0].split('dump-logits ')[-1]})")
    print(f"{model_dir.name}: {rep['rows']} logit rows along HF fp32's greedy paths (logit std {rep['logit_std']:.3f})")
    print(f"  serve8      vs HF fp32: max |diff| {a['max_abs_diff']:.4f}, mean {a['mean_abs_diff']:.5f}, "
          f"top-1 {a['top1_agreement']:.4f}")
    print(f"  HF bf16     vs HF fp32: max |diff| {b['max_abs_diff']:.4f}, mean {b['mean_abs_diff']:.5f}, "
          f"top-1 {b['top1_agreement']:.4f}")
    print(f"  teacher-forced greedy ids equal to HF fp32's: serve8 {sum(forced_greedy['serve8'])}/{n} "
          f"{forced_greedy['serve8']}, HF bf16 {sum(forced_greedy['hf_bf16'])}/{n} {forced_greedy['hf_bf16']}")
    for d in disagreements:
        print(f"    {d['who']}: prompt {d['prompt']} step {d['step']}: picked {d['picked']} not {d['reference_id']}, "
              f"HF fp32 margin {d['reference_margin']:.4f} ({'within' if d['within_noise'] else 'BEYOND'} 2x noise "
              f"{2 * noise:.4f})")
    fr = rep["free_running_leading_equal"]
    print(f"  free-running leading ids equal (of {GREEDY}): serve8 vs HF fp32 {fr['serve8_vs_hf_fp32']}, "
          f"vs HF bf16 {fr['serve8_vs_hf_bf16']}; HF bf16 vs HF fp32 {fr['hf_bf16_vs_hf_fp32']}")


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(*sys.argv[2:5])
    elif sys.argv[1] == "build-gguf":
        build_gguf(*sys.argv[2:4])
    elif sys.argv[1] == "compare":
        compare(*sys.argv[2:5])
    else:
        sys.exit(__doc__)
