"""SGLang's own benchmark client against serve8 (skipped unless it is installed).

sglang >= 0.5.15 imports its GPU runtime from bench_serving, so the client is sglang 0.5.5,
installed without dependencies plus the few its client needs:
  pip install --no-deps sglang==0.5.5
  pip install aiohttp tqdm transformers sentencepiece protobuf datasets pillow pybase64
"--dataset-name random" samples its prompts from a ShareGPT file; a synthetic one is written here
so nothing is downloaded.
"""

import json
import os
import random
import re
import subprocess
import sys

import pytest

from conftest import SHARED_DIR

try:
    import sglang.bench_serving  # noqa: F401
    import sentencepiece  # noqa: F401
    import transformers  # noqa: F401
except Exception as e:  # ImportError, or a newer sglang that needs its GPU stack
    pytest.skip(f"sglang.bench_serving is not usable here: {e}", allow_module_level=True)


@pytest.fixture(scope="module")
def bench_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    tok = d / "tok"
    tok.mkdir()
    (tok / "tokenizer.model").write_bytes((SHARED_DIR / "models" / "llama2-tokenizer" / "tokenizer.model").read_bytes())
    (tok / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "add_bos_token": True, "add_eos_token": False, "legacy": True}))
    rng = random.Random(0)
    words = "the a cat dog ran over hill story little girl boy happy sun moon tree house played friend".split()
    conversations = [{"id": str(i), "conversations": [
        {"from": "human", "value": " ".join(rng.choice(words) for _ in range(rng.randrange(20, 120)))},
        {"from": "gpt", "value": " ".join(rng.choice(words) for _ in range(rng.randrange(20, 120)))}]}
        for i in range(100)]
    sharegpt = d / "sharegpt.json"
    sharegpt.write_text(json.dumps(conversations))
    return tok, sharegpt


@pytest.mark.parametrize("backend,extra", [("sglang", []), ("sglang-oai-chat", [])])
def test_bench_serving(text_server, bench_inputs, backend, extra):
    tok, sharegpt = bench_inputs
    n = 16
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", backend, "--host", "127.0.0.1",
           "--port", str(text_server.port), "--model", text_server.served_name, "--tokenizer", str(tok),
           "--dataset-name", "random", "--dataset-path", str(sharegpt), "--num-prompts", str(n),
           "--random-input-len", "64", "--random-output-len", "24", "--disable-tqdm"] + extra
    # Offline: the client would otherwise look the model name up on the Hugging Face hub.
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    # cwd: the client writes a results file there.
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tok.parent)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    m = re.search(r"Successful requests:\s+(\d+)", out.stdout)
    assert m and int(m.group(1)) == n, out.stdout[-3000:]
    text_server.assert_all_slots_free()
