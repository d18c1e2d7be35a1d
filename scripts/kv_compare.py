#!/usr/bin/env python3
"""How far one run's logits are from another's (serve8 dump-logits .npy files of the same prompts):
mean KL divergence KL(P_ref || P_test) over all rows, and how often the top-1 ids agree.

usage: kv_compare.py REF.npy TEST.npy [LABEL]
Used for a KV dtype against bf16 KV on the same model and prompts (`scripts/gpu.sh e2e kvfp8`).
"""
import sys

import numpy as np


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def main(ref_path, test_path, label=""):
    ref = np.load(ref_path).astype(np.float64)
    test = np.load(test_path).astype(np.float64)
    assert ref.shape == test.shape, f"{ref.shape} vs {test.shape}"
    ref = ref.reshape(-1, ref.shape[-1])
    test = test.reshape(-1, test.shape[-1])
    lp, lq = log_softmax(ref), log_softmax(test)
    kld = (np.exp(lp) * (lp - lq)).sum(-1)
    top1 = (ref.argmax(-1) == test.argmax(-1)).mean()
    print(f"{label or test_path}: {ref.shape[0]} rows, mean KLD {kld.mean():.3e} (max {kld.max():.3e}), "
          f"same top-1 {100 * top1:.2f}%")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:4])
