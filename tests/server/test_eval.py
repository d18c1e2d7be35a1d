"""serve8 eval gsm8k / mmlu: end to end against serve8 serve, and exact scoring against a stub
server whose answers are known."""

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from conftest import SHARED_DIR, serve8_bin

GSM8K = SHARED_DIR / "data" / "gsm8k"


def run_eval(args, tmp_path):
    out = tmp_path / "eval.jsonl"
    r = subprocess.run([serve8_bin(), "eval"] + args + ["--output-file", str(out)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text().splitlines()[-1])


def write_mmlu(root):
    """Two subjects, two dev and three test questions each (one answer field quoted with a comma)."""
    for sub in ("dev", "test"):
        (root / sub).mkdir(parents=True)
    rows = {"dev": ["1+1?,1,2,3,4,B", "2+2?,4,3,2,1,A"],
            "test": ["3+3?,6,5,4,3,A", '"Pick, the third",x,y,z,w,C', "Last?,a,b,c,d,D"]}
    for subject in ("abstract_algebra", "college_math"):
        for sub in ("dev", "test"):
            (root / sub / f"{subject}_{sub}.csv").write_text("\n".join(rows[sub]) + "\n")


def test_gsm8k_and_mmlu_against_serve8(text_server, tmp_path):
    port = text_server.url.rsplit(":", 1)[1]
    g = run_eval(["gsm8k", "--port", port, "--data-path", str(GSM8K), "--num-questions", "4", "--num-shots", "2",
                  "--max-new-tokens", "16"], tmp_path)
    assert g["task"] == "gsm8k" and g["num_questions"] == 4
    assert 0 <= g["accuracy"] <= 1 and 0 <= g["invalid"] <= 1 and g["latency_s"] > 0 and g["output_throughput"] > 0
    write_mmlu(tmp_path / "mmlu")
    m = run_eval(["mmlu", "--port", port, "--data-dir", str(tmp_path / "mmlu"), "--nsub", "2"], tmp_path)
    assert m["task"] == "mmlu" and m["num_questions"] == 6 and 0 <= m["accuracy"] <= 1


class Stub(BaseHTTPRequestHandler):
    """/generate: answers from the last question of the prompt (the few-shot prefix is ignored)."""
    answers = {}
    prompts = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["text"]
        Stub.prompts.append(prompt)
        last = prompt.rsplit("Question: ", 1)[-1] if "Question: " in prompt else prompt.rsplit("\n\n", 1)[-1]
        text = next((a for q, a in Stub.answers.items() if last.startswith(q)), "no idea")
        data = json.dumps({"text": text, "meta_info": {"completion_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    server = HTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_scoring_against_known_answers(stub, tmp_path):
    test = [json.loads(l) for l in open(GSM8K / "test.jsonl")][:4]
    Stub.answers = {test[0]["question"][:40]: " She makes 9 * 2 = $18 a day, so 18.",  # right (label 18)
                    test[1]["question"][:40]: " It takes 1,000 bolts.",  # wrong, but a number
                    test[2]["question"][:40]: " I cannot say."}  # no number: invalid
    Stub.prompts = []
    g = run_eval(["gsm8k", "--port", str(stub), "--data-path", str(GSM8K), "--num-questions", "4", "--num-shots", "3",
                  "--parallel", "2"], tmp_path)
    assert g["num_questions"] == 4
    assert g["accuracy"] == pytest.approx(0.25)
    assert g["invalid"] == pytest.approx(0.5)  # question 3 and question 4 ("no idea")
    assert all(p.count("Question: ") == 4 and p.endswith("\nAnswer:") for p in Stub.prompts)  # 3 shots + the question
    write_mmlu(tmp_path / "mmlu")
    Stub.answers = {"3+3?": " A", "Pick, the third": "B", "Last?": " D"}
    Stub.prompts = []
    m = run_eval(["mmlu", "--port", str(stub), "--data-dir", str(tmp_path / "mmlu"), "--nsub", "1", "--ntrain", "2"],
                 tmp_path)
    assert m["num_questions"] == 3 and m["accuracy"] == pytest.approx(2 / 3) and m["invalid"] == 0
    assert all(p.startswith("The following are multiple choice questions (with answers) about abstract algebra.")
               and p.count("Answer:") == 3 for p in Stub.prompts)
