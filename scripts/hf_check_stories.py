#!/usr/bin/env python3
"""Greedy ids of the converted stories260K from HF transformers (fp32 and bf16) next to the
golden ids of llama2.c's run.c and serve8's own output files, on the GPU machine.

usage: hf_check_stories.py MODEL_DIR GOLDEN_JSON SERVE8_OUT_DIR
serve8's outputs are files stories_<kv>_<case>.txt of space-separated ids (`scripts/gpu.sh e2e golden`).
"""
import json
import pathlib
import sys

import torch
from transformers import LlamaForCausalLM


def lead(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main():
    model_dir, golden, s8 = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    cases = json.load(open(golden))["cases"]
    for dtype in (torch.float32, torch.bfloat16):
        m = LlamaForCausalLM.from_pretrained(model_dir, dtype=dtype).cuda().eval()
        for c, case in enumerate(cases):
            ids = torch.tensor([case["prompt_ids"]], device="cuda")
            n = len(case["greedy_ids"])
            with torch.no_grad():
                out = m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, ids.shape[1]:].tolist()
            line = f"HF {str(dtype).split('.')[-1]} case {c}: {lead(out, case['greedy_ids'])}/{n} equal to run.c"
            f = s8 / f"stories_bf16_{c}.txt"
            if dtype == torch.bfloat16 and f.exists():
                mine = list(map(int, f.read_text().split()))
                line += f"; serve8 cuda bf16 vs HF bf16: {lead(mine, out)}/{n} equal; first ids HF {out[:4]} serve8 {mine[:4]}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
