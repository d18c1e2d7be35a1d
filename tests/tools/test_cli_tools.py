"""bench-one-batch and dump-logits on the CPU, with stories260K (llama2.c's run.c is the oracle)."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

SHARED = Path(os.environ.get("SERVE8_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared"))
BIN = os.environ.get("SERVE8_BIN", "serve8")


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    out = tmp_path_factory.mktemp("stories260K")
    subprocess.run([BIN, "convert", "llama2c", "--checkpoint", str(SHARED / "models/stories260K/stories260K.bin"),
                    "--output", str(out)], check=True, capture_output=True)
    return out


def golden():
    return json.load(open(SHARED / "golden/stories260K/greedy.json"))["cases"]


def test_dump_logits_follows_run_c(stories, tmp_path):
    """Teacher-forced over the golden path, the argmax of every dumped row is run.c's next id, and
    the greedy continuation is run.c's too."""
    cases = golden()
    d, g = 6, 10
    lines, expect_rows, expect_greedy = [], [], []
    for c in cases:
        path = c["prompt_ids"] + c["greedy_ids"]
        cut = len(c["prompt_ids"]) + 12  # 12 golden ids into the prompt, then d of them decoded
        lines.append(" ".join(map(str, path[:cut])))
        expect_rows.append(path[cut - d:cut + 1])  # the id each row must predict
        expect_greedy.append(path[cut:cut + g])
    (tmp_path / "prompts.txt").write_text("\n".join(lines) + "\n")
    prefix = tmp_path / "out"
    subprocess.run([BIN, "dump-logits", "--device", "cpu", "--model-path", str(stories), "--prompts-file",
                    str(tmp_path / "prompts.txt"), "--decode-tokens", str(d), "--greedy-tokens", str(g),
                    "--output", str(prefix)], check=True, capture_output=True)
    logits = np.load(str(prefix) + ".npy")
    meta = json.load(open(str(prefix) + ".json"))
    assert logits.shape == (3, d + 1, 512)
    for i in range(3):
        assert logits[i].argmax(-1).tolist() == expect_rows[i], f"case {i}"
        assert meta["prompts"][i]["greedy_ids"] == expect_greedy[i], f"case {i}"
        assert meta["prompts"][i]["positions"] == list(range(len(lines[i].split()) - d - 1, len(lines[i].split())))


def test_dump_logits_rejects_out_of_vocab(stories, tmp_path):
    (tmp_path / "p.txt").write_text("1 2 99999 4 5 6 7 8 9 10\n")
    r = subprocess.run([BIN, "dump-logits", "--device", "cpu", "--model-path", str(stories), "--prompts-file",
                        str(tmp_path / "p.txt"), "--output", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode != 0
    assert "99999" in r.stderr + r.stdout


def test_bench_one_batch_writes_results(stories, tmp_path):
    res = tmp_path / "r.jsonl"
    r = subprocess.run([BIN, "bench-one-batch", "--device", "cpu", "--model-path", str(stories), "--batch-size", "1",
                        "3", "--input-len", "16", "--output-len", "5", "--kv-cache-dtype", "bf16", "--copy-gbps", "10",
                        "--result-filename", str(res)],
                       check=True, capture_output=True, text=True)
    rows = [json.loads(l) for l in res.read_text().splitlines()]
    assert [x["batch_size"] for x in rows] == [1, 3]
    cfg = json.load(open(stories / "config.json"))
    layers, kv_dim = cfg["num_hidden_layers"], cfg["hidden_size"] // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    for x in rows:
        assert x["input_len"] == 16 and x["output_len"] == 5
        assert x["prefill_latency_s"] > 0 and x["median_decode_latency_s"] > 0
        assert x["median_decode_throughput"] == pytest.approx(x["batch_size"] / x["median_decode_latency_s"])
        # K/V of the mean context over the 5 steps (16 + 3 tokens), 2 bytes each (bf16 KV), on top of
        # the weights: the step with 3 sequences reads 2 x 19 more tokens' K/V than the one with 1.
        kv_token = 2 * layers * kv_dim * 2
        assert x["decode_step_bytes"] > 19 * x["batch_size"] * kv_token
        assert x["decode_read_gb_per_s"] == pytest.approx(x["decode_step_bytes"] / x["median_decode_latency_s"] / 1e9)
        assert x["decode_mbu"] == pytest.approx(x["decode_read_gb_per_s"] / 10)
        assert "bench-one-batch" in x["command"] and x["device"] and x["date"]
    assert rows[1]["decode_step_bytes"] - rows[0]["decode_step_bytes"] == pytest.approx(2 * 19 * kv_token)
    assert "median latency" in r.stdout


def test_step_table_rows_and_ratio_from_records(stories, tmp_path):
    """bench/step_table.py on bench-one-batch records: a row per KV dtype and batch, in run order,
    each with its median step and MBU, and the FP8 rows' step over the bf16 row of its batch."""
    res = tmp_path / "r.jsonl"
    for kv in ("bf16", "fp8_e5m2"):
        subprocess.run([BIN, "bench-one-batch", "--device", "cpu", "--model-path", str(stories), "--batch-size", "1",
                        "2", "--input-len", "16", "--output-len", "4", "--kv-cache-dtype", kv, "--copy-gbps", "10",
                        "--result-filename", str(res)], check=True, capture_output=True)
    records = [json.loads(l) for l in res.read_text().splitlines()]
    script = Path(__file__).resolve().parents[2] / "bench/step_table.py"
    out = subprocess.run(["python3", str(script), str(res)], check=True, capture_output=True, text=True).stdout
    rows = [l for l in out.splitlines() if l.startswith("| stories")]
    assert len(rows) == 4
    step = {(x["kv_cache_dtype"], x["batch_size"]): x["median_decode_latency_s"] * 1e3 for x in records}
    for line, x in zip(rows, records):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0].endswith(", " + x["kv_cache_dtype"]) and cells[1] == "16" and cells[2] == str(x["batch_size"])
        assert float(cells[3]) == pytest.approx(step[(x["kv_cache_dtype"], x["batch_size"])], abs=0.006)
        assert float(cells[4].rstrip("%")) == pytest.approx(100 * x["decode_mbu"], abs=0.06)
        assert cells[5] == cells[6] == cells[7] == "-"  # no kernel trace on the CPU
        if x["kv_cache_dtype"] == "bf16":
            assert cells[8] == "-"
        else:
            want = step[("fp8_e5m2", x["batch_size"])] / step[("bf16", x["batch_size"])]
            assert float(cells[8]) == pytest.approx(want, abs=0.0006)


def test_gemm_tuning_table_steps_per_mode(stories, tmp_path):
    """bench/gemm_tuning_table.py on bench-one-batch records run with --gemm-tuning off and auto: a
    row per batch with each mode's step and auto's over off's (the CPU times no GEMM shapes)."""
    res = tmp_path / "r.jsonl"
    for mode in ("off", "auto"):
        subprocess.run([BIN, "bench-one-batch", "--device", "cpu", "--model-path", str(stories), "--batch-size", "1",
                        "2", "--input-len", "16", "--output-len", "4", "--gemm-tuning", mode,
                        "--result-filename", str(res)], check=True, capture_output=True)
    records = [json.loads(l) for l in res.read_text().splitlines()]
    assert all("gemm_timings" not in x for x in records)
    step = {(x["command"].split("--gemm-tuning ")[1].split()[0], x["batch_size"]): x["median_decode_latency_s"] * 1e3
            for x in records}
    script = Path(__file__).resolve().parents[2] / "bench/gemm_tuning_table.py"
    out = subprocess.run(["python3", str(script), str(res)], check=True, capture_output=True, text=True).stdout
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in out.splitlines() if l.startswith("| stories")]
    assert [r[1] for r in rows] == ["1", "2"]
    for cells in rows:
        b = int(cells[1])
        assert float(cells[2]) == pytest.approx(step[("off", b)], abs=0.006)
        assert float(cells[3]) == pytest.approx(step[("auto", b)], abs=0.006)
        assert float(cells[4]) == pytest.approx(step[("auto", b)] / step[("off", b)], abs=0.0006)
        assert cells[5] == "-"
    r = subprocess.run([BIN, "bench-one-batch", "--device", "cpu", "--model-path", str(stories), "--gemm-tuning",
                        "sometimes"], capture_output=True, text=True)
    assert r.returncode != 0 and "--gemm-tuning" in r.stderr + r.stdout


def run_offline(args, tmp_path):
    res = tmp_path / "offline.jsonl"
    r = subprocess.run([BIN, "bench-offline", "--device", "cpu", "--result-filename", str(res)] + args,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Offline Throughput Benchmark Result" in r.stdout
    return json.loads(res.read_text().splitlines()[-1])


def test_bench_offline_sharegpt_counts_real_tokens(tmp_path):
    """The built-in model with the Llama-2 tokenizer: input tokens are the SentencePiece counts
    (+ BOS) of the first 12 ShareGPT prompts, output tokens exactly 12 x 8."""
    import sentencepiece as spm

    path = SHARED / "data/sharegpt/ShareGPT_V3_filtered_500.json"
    convs = json.load(open(path))
    prompts = [next(t["value"] for t in c["conversations"] if t["from"] == "human") for c in convs[:12]]
    sp = spm.SentencePieceProcessor(model_file=str(SHARED / "models/llama2-tokenizer/tokenizer.model"))
    want_input = sum(len(sp.encode(p)) + 1 for p in prompts)
    x = run_offline(["--tokenizer-path", str(SHARED / "models/llama2-tokenizer"), "--dataset-name", "sharegpt",
                     "--dataset-path", str(path), "--num-prompts", "12",
                     "--sharegpt-output-len", "8"], tmp_path)
    assert x["successful_requests"] == 12
    assert x["total_input_tokens"] == want_input
    assert x["total_output_tokens"] == 96
    assert 1 <= x["peak_running_requests"] <= 12
    assert x["request_throughput"] == pytest.approx(12 / x["duration"])
    assert 0 < x["mean_ttft_ms"] <= x["mean_e2e_latency_ms"]


def test_bench_offline_random_ids_lengths(stories, tmp_path):
    x = run_offline(["--model-path", str(stories), "--dataset-name", "random-ids", "--num-prompts", "30",
                     "--random-input-len", "64", "--random-output-len", "32", "--random-range-ratio", "0.5"],
                    tmp_path)
    assert x["successful_requests"] == 30
    assert 30 * 32 <= x["total_input_tokens"] <= 30 * 64
    assert 30 * 16 <= x["total_output_tokens"] <= 30 * 32
    assert x["total_throughput"] == pytest.approx((x["total_input_tokens"] + x["total_output_tokens"]) / x["duration"])


def test_bench_offline_bad_dataset_is_an_error(stories):
    r = subprocess.run([BIN, "bench-offline", "--device", "cpu", "--model-path", str(stories), "--dataset-name",
                        "sharegpt"], capture_output=True, text=True)
    assert r.returncode != 0
    assert "--tokenizer-path" in r.stderr + r.stdout or "--dataset-path" in r.stderr + r.stdout


def calibrate(stories, tmp_path, name, *args):
    ids = " ".join(" ".join(map(str, c["prompt_ids"] + c["greedy_ids"])) for c in golden())
    (tmp_path / "ids.txt").write_text(ids)
    out = tmp_path / name
    r = subprocess.run([BIN, "calibrate", "--device", "cpu", "--model-path", str(stories), "--ids-file",
                        str(tmp_path / "ids.txt"), "--context", "128", "--output", str(out)] + list(args),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.load(open(out))["kv_cache"]


def test_calibrate_granularity_and_margin(stories, tmp_path):
    cfg = json.load(open(stories / "config.json"))
    layers, heads = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    head = calibrate(stories, tmp_path, "head.json")
    layer = calibrate(stories, tmp_path, "layer.json", "--granularity", "per-layer")
    double = calibrate(stories, tmp_path, "double.json", "--margin", "2")
    assert head["dtype"] == "float8_e4m3fn"
    assert sorted(head["k_scale"], key=int) == [str(i) for i in range(layers)]
    for l in map(str, range(layers)):
        for which in ("k_scale", "v_scale"):
            assert len(head[which][l]) == heads and all(s > 0 for s in head[which][l])
            # per layer = the layer's largest head; margin 2 doubles every scale exactly
            assert layer[which][l] == max(head[which][l])
            assert double[which][l] == [2 * s for s in head[which][l]]
        assert head["scaling_factor"]["0"][l] == max(head["k_scale"][l] + head["v_scale"][l])


def test_engine_reads_scales_and_rejects_a_mismatch(stories, tmp_path):
    calibrate(stories, tmp_path, "s.json")
    base = [BIN, "generate", "--device", "cpu", "--prompt-ids", "1 2 3", "--max-new-tokens", "2", "--output-ids",
            "--kv-cache-dtype", "fp8_e4m3"]
    ok = subprocess.run(base + ["--model-path", str(stories), "--quantization-param-path", str(tmp_path / "s.json")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "KV scales from " + str(tmp_path / "s.json") in ok.stderr + ok.stdout
    none = subprocess.run(base + ["--model-path", str(stories)], capture_output=True, text=True)
    assert none.returncode == 0
    assert "--quantization-param-path" in none.stderr and "serve8 calibrate" in none.stderr
    # The built-in model has 2 layers, stories260K 5: the file does not fit it.
    bad = subprocess.run(base + ["--model-path", "builtin:tiny-llama", "--quantization-param-path",
                                 str(tmp_path / "s.json")], capture_output=True, text=True)
    assert bad.returncode != 0
    assert "s.json" in bad.stderr and "layers" in bad.stderr


def test_calibrate_writes_means_that_int4_rows_centre_on(stories, tmp_path):
    cfg = json.load(open(stories / "config.json"))
    layers, heads = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    d = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv = calibrate(stories, tmp_path, "s.json")
    for which in ("k_mean", "v_mean"):
        assert sorted(kv[which], key=int) == [str(i) for i in range(layers)]
        assert all(len(kv[which][l]) == heads and all(len(h) == d for h in kv[which][l]) for l in kv[which])
    # K rows after RoPE are far from zero-mean somewhere: the means are not all zero.
    assert max(abs(x) for l in kv["k_mean"].values() for h in l for x in h) > 1e-3
    base = [BIN, "generate", "--device", "cpu", "--model-path", str(stories), "--prompt-ids", "1 2 3",
            "--max-new-tokens", "2", "--output-ids", "--kv-cache-dtype", "int4"]
    ok = subprocess.run(base + ["--quantization-param-path", str(tmp_path / "s.json")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "int4 KV rows centred on the K/V means of " + str(tmp_path / "s.json") in ok.stderr + ok.stdout
    plain = subprocess.run(base, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr


def eval_kld(stories, tmp_path, kv, ids_text, *args):
    (tmp_path / "docs.txt").write_text(ids_text)
    out = tmp_path / f"kld_{kv}.jsonl"
    r = subprocess.run([BIN, "eval", "kld", "--device", "cpu", "--model-path", str(stories), "--ids-file",
                        str(tmp_path / "docs.txt"), "--kv-cache-dtype", kv, "--reference-kv-cache-dtype", "fp32",
                        "--output-file", str(out)] + list(args), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Mean    KLD:" in r.stdout and "RMS Δp" in r.stdout
    return json.loads(out.read_text().splitlines()[-1])


def test_eval_kld_against_dump_logits_and_itself(stories, tmp_path):
    doc = golden()[2]
    ids = doc["prompt_ids"] + doc["greedy_ids"]  # 76 tokens, BOS first: one chunk of the whole story
    same = eval_kld(stories, tmp_path, "fp32", " ".join(map(str, ids)) + "\n", "--context", "128")
    assert same["scored"] == len(ids) - len(ids) // 2
    assert same["mean_kld"] == 0 and same["max_kld"] == 0 and same["same_top1"] == 1 and same["delta_ppl"] == 0
    # The reference perplexity from dump-logits' rows over the same positions.
    half = len(ids) // 2
    (tmp_path / "p.txt").write_text(" ".join(map(str, ids)) + "\n")
    subprocess.run([BIN, "dump-logits", "--device", "cpu", "--model-path", str(stories), "--prompts-file",
                    str(tmp_path / "p.txt"), "--decode-tokens", str(len(ids) - half), "--greedy-tokens", "0",
                    "--output", str(tmp_path / "d")], check=True, capture_output=True)
    rows = np.load(str(tmp_path / "d") + ".npy")[0].astype(np.float64)  # positions half-1 .. len-1
    lse = rows.max(-1) + np.log(np.exp(rows - rows.max(-1, keepdims=True)).sum(-1))
    nll = [lse[j] - rows[j, ids[half + j]] for j in range(len(ids) - half)]
    assert same["ppl_reference"] == pytest.approx(float(np.exp(np.mean(nll))), rel=1e-4)
    # Coarser KV formats move the predictions more.
    fp16 = eval_kld(stories, tmp_path, "fp16", " ".join(map(str, ids)) + "\n", "--context", "128")
    e5m2 = eval_kld(stories, tmp_path, "fp8_e5m2", " ".join(map(str, ids)) + "\n", "--context", "128")
    assert 0 < fp16["mean_kld"] < 1e-3 < e5m2["mean_kld"]
    assert e5m2["ppl_reference"] == same["ppl_reference"]


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t["dtype"]
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.float32).reshape(t["shape"])
    return out


def write_llama_gguf(hf_dir, out, qtype):
    """stories260K as llama.cpp's converter would write it: llama.cpp names, q/k rows interleaved
    per head for its RoPE (the converter's permute), matrices in `qtype`, norms in F32."""
    from gguf import GGMLQuantizationType as T
    from gguf import GGUFWriter
    from gguf.quants import quantize

    cfg = json.load(open(hf_dir / "config.json"))
    w = read_safetensors(hf_dir / "model.safetensors")
    heads, kv_heads, layers = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    g = GGUFWriter(str(out), "llama")
    g.add_block_count(layers)
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(cfg["hidden_size"])
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_head_count(heads)
    g.add_head_count_kv(kv_heads)
    g.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    g.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    g.add_vocab_size(cfg["vocab_size"])
    g.add_bos_token_id(1)
    g.add_eos_token_id(2)

    def permute(x, n):
        return x.reshape(n, 2, x.shape[0] // n // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)

    def add(name, x, matrix=True):
        x = np.ascontiguousarray(x, dtype=np.float32)
        if matrix and qtype != T.F32 and x.shape[-1] % 32 == 0:  # rows of whole blocks, else F32 as llama.cpp
            g.add_tensor(name, quantize(x, qtype), raw_dtype=qtype)
        else:
            g.add_tensor(name, x)

    add("token_embd.weight", w["model.embed_tokens.weight"])
    for l in range(layers):
        p = f"model.layers.{l}."
        add(f"blk.{l}.attn_norm.weight", w[p + "input_layernorm.weight"], False)
        add(f"blk.{l}.attn_q.weight", permute(w[p + "self_attn.q_proj.weight"], heads))
        add(f"blk.{l}.attn_k.weight", permute(w[p + "self_attn.k_proj.weight"], kv_heads))
        add(f"blk.{l}.attn_v.weight", w[p + "self_attn.v_proj.weight"])
        add(f"blk.{l}.attn_output.weight", w[p + "self_attn.o_proj.weight"])
        add(f"blk.{l}.ffn_norm.weight", w[p + "post_attention_layernorm.weight"], False)
        add(f"blk.{l}.ffn_gate.weight", w[p + "mlp.gate_proj.weight"])
        add(f"blk.{l}.ffn_up.weight", w[p + "mlp.up_proj.weight"])
        add(f"blk.{l}.ffn_down.weight", w[p + "mlp.down_proj.weight"])
    add("output_norm.weight", w["model.norm.weight"], False)
    if "lm_head.weight" in w:
        add("output.weight", w["lm_head.weight"])
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def generate_ids(model, prompt, n):
    r = subprocess.run([BIN, "generate", "--device", "cpu", "--model-path", str(model), "--prompt-ids",
                        " ".join(map(str, prompt)), "--max-new-tokens", str(n), "--temperature", "0", "--ignore-eos",
                        "--output-ids"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return list(map(int, r.stdout.split()))


def test_gguf_model_reproduces_run_c(stories, tmp_path):
    """stories260K written as a llama.cpp-style GGUF (F32, q/k permuted) loads back to the same model:
    run.c's greedy ids for every case. A Q8_0 copy loads and generates in full."""
    from gguf import GGMLQuantizationType as T

    write_llama_gguf(stories, tmp_path / "s.gguf", T.F32)
    for c in golden():
        n = len(c["greedy_ids"])
        assert generate_ids(tmp_path / "s.gguf", c["prompt_ids"], n) == c["greedy_ids"]
    write_llama_gguf(stories, tmp_path / "q8.gguf", T.Q8_0)
    c = golden()[2]
    q8 = generate_ids(tmp_path / "q8.gguf", c["prompt_ids"], 20)
    assert len(q8) == 20 and all(0 <= t < 512 for t in q8)


def test_dummy_weights_too_big_fail_before_allocating(tmp_path):
    """A config whose weights cannot fit is refused at once, naming the size, instead of growing to
    several GB first."""
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
           "num_hidden_layers": 100000, "num_attention_heads": 32, "vocab_size": 32000,
           "max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([BIN, "generate", "--device", "cpu", "--model-path", str(tmp_path), "--load-format", "dummy",
                        "--prompt-ids", "1 2 3"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert "100000 layers" in r.stderr and "GiB" in r.stderr, r.stderr[-1000:]
