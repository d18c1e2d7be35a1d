"""serve8 bench-serving (SGLang's bench_serving, in C++) against serve8 serve on the CPU."""

import json
import subprocess

import pytest

from conftest import SHARED_DIR, serve8_bin

SHAREGPT = SHARED_DIR / "data" / "sharegpt" / "ShareGPT_V3_filtered_500.json"
TOKENIZER = SHARED_DIR / "models" / "llama2-tokenizer"


def bench(server, tmp_path, *args):
    out = tmp_path / "bench.jsonl"
    r = subprocess.run([serve8_bin(), "bench-serving", "--base-url", server.url, "--output-file", str(out)]
                       + list(args), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    assert "Serving Benchmark Result" in r.stdout and "Median TTFT (ms):" in r.stdout
    return json.loads(out.read_text().splitlines()[-1])


def check_sane(x, n):
    assert x["completed"] == n
    assert x["request_throughput"] == pytest.approx(n / x["duration"])
    assert x["total_throughput"] == pytest.approx((x["total_input_tokens"] + x["total_output_tokens"]) / x["duration"])
    assert 0 < x["median_ttft_ms"] <= x["p99_ttft_ms"]
    assert 0 < x["mean_ttft_ms"] <= x["mean_e2e_latency_ms"]
    assert 0 < x["median_itl_ms"] <= x["p95_itl_ms"] <= x["p99_itl_ms"] <= x["max_itl_ms"]
    assert x["mean_tpot_ms"] > 0 and x["concurrency"] > 0


def test_sglang_sharegpt_counts(text_server, tmp_path):
    import sentencepiece as spm

    convs = json.load(open(SHAREGPT))
    prompts = [next(t["value"] for t in c["conversations"] if t["from"] == "human") for c in convs[:12]]
    sp = spm.SentencePieceProcessor(model_file=str(TOKENIZER / "tokenizer.model"))
    x = bench(text_server, tmp_path, "--backend", "sglang", "--tokenizer", str(TOKENIZER), "--dataset-name", "sharegpt",
              "--dataset-path", str(SHAREGPT), "--num-prompts", "12", "--sharegpt-output-len", "8")
    check_sane(x, 12)
    assert x["total_output_tokens"] == 96
    assert x["total_input_tokens"] == sum(len(sp.encode(p)) + 1 for p in prompts)  # + BOS


def test_openai_chat_poisson_with_concurrency_limit(text_server, tmp_path):
    x = bench(text_server, tmp_path, "--backend", "openai-chat", "--tokenizer", str(TOKENIZER), "--dataset-name",
              "random", "--num-prompts", "16", "--random-input-len", "40", "--random-output-len", "6",
              "--random-range-ratio", "1.0", "--request-rate", "50", "--max-concurrency", "2")
    check_sane(x, 16)
    assert x["total_output_tokens"] == 16 * 6
    assert x["concurrency"] <= 2.05


def test_openai_random_ids(ids_server, tmp_path):
    x = bench(ids_server, tmp_path, "--backend", "openai", "--dataset-name", "random-ids", "--num-prompts", "10",
              "--random-input-len", "30", "--random-output-len", "12", "--random-range-ratio", "1.0",
              "--disable-stream")
    assert x["completed"] == 10
    assert x["total_input_tokens"] == 300 and x["total_output_tokens"] == 120
    assert x["mean_ttft_ms"] == pytest.approx(x["mean_e2e_latency_ms"])  # no stream: all at once


def test_unreachable_server_is_an_error(tmp_path):
    r = subprocess.run([serve8_bin(), "bench-serving", "--port", "1", "--dataset-name", "random-ids",
                        "--num-prompts", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "did not answer" in r.stderr + r.stdout
