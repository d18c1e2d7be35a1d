#!/usr/bin/env python3
"""The weight-only view of an FP8 checkpoint from `serve8 convert fp8 --activations token`.

--activations only names the scheme in config.json (the codes do not depend on it), so the
weight-only checkpoint is the same tensors under a config without input_activations: OUT gets
links to IN's safetensors and that config.

  python3 scripts/fp8_weight_only.py IN OUT
"""
import glob
import json
import os
import shutil
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = (os.path.abspath(p) for p in sys.argv[1:])
    config = json.load(open(os.path.join(src, "config.json")))
    for group in config["quantization_config"]["config_groups"].values():
        group["input_activations"] = None
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for f in glob.glob(os.path.join(src, "*.safetensors")):
        os.symlink(f, os.path.join(dst, os.path.basename(f)))
    with open(os.path.join(dst, "config.json"), "w") as out:
        json.dump(config, out, indent=2)


if __name__ == "__main__":
    main()
