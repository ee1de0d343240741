"""`lmlab serve`'s JSON API over tiny runs: every endpoint, its bounds and its errors, with
the server in a thread on a free port."""

import json
import socket
import time

import pytest

from lmlab.cli import main
from tests.cli_process import http_request
from tests.serve_runs import make_runs, serving


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_runs(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(runs):
    with serving(runs) as server:
        yield server


def request(server, method: str, path: str, body=None, raw: bytes | None = None):
    """(status, decoded JSON or text) of one request."""
    return http_request(*server.server_address[:2], method, path, body, raw)


def sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        kind, data = (line.split(": ", 1)[1] for line in block.splitlines())
        events.append((kind, json.loads(data)))
    return events


@pytest.fixture
def slow_model(server):
    """The causal run taking 50 ms a forward pass, so a generation outlasts a request."""
    model = server.runs.get("clm").run.model
    handle = model.register_forward_hook(lambda *_: time.sleep(0.05))
    yield
    handle.remove()


def test_runs_say_what_each_can_do(server):
    status, answer = request(server, "GET", "/api/runs")
    assert status == 200
    can = {run["name"]: run["can"] for run in answer["runs"]}
    assert can["mlm"]["fill_mask"] and not can["mlm"]["generate"]
    assert can["clm"]["generate"] and not can["clm"]["fill_mask"]
    assert all(can[task]["predict"] for task in ("classify", "qa", "ner"))
    assert all(c["metrics"] for c in can.values())
    assert answer["comparisons"] == [
        {"name": "comparison", "finished": True, "report": "/report/comparison"},
        {"name": "comparison-running", "finished": False, "report": None}]
    assert [run["attention"] for run in answer["runs"][:4]] == [
        ["bidirectional"], ["causal"], ["prefix"], ["span-corruption"]]


def test_the_page_and_its_assets_are_served(server):
    for path, text in [("/", "<title>lmlab playground"), ("/app.js", "showError"),
                       ("/style.css", ".grid")]:
        status, content = request(server, "GET", path)
        assert status == 200 and text in content
    assert request(server, "GET", "/../pyproject.toml")[0] == 404
    for icon in ("/favicon.svg", "/favicon.ico"):  # the page's, and where browsers look
        status, content = request(server, "GET", icon)
        assert status == 200 and content.startswith("<svg")
    assert '<link rel="icon" href="/favicon.svg"' in request(server, "GET", "/")[1]


def test_fill_mask_ranks_candidates(server):
    status, answer = request(server, "POST", "/api/fill-mask",
                             {"run": "mlm", "text": "the cat [MASK] home [MASK]", "top_k": 3})
    assert status == 200
    assert [len(mask) for mask in answer["masks"]] == [3, 3]
    probabilities = [c["probability"] for c in answer["masks"][0]]
    assert probabilities == sorted(probabilities, reverse=True)


def test_a_feature_the_run_lacks_is_refused_with_the_cli_reason(server, runs, capsys):
    status, answer = request(server, "POST", "/api/fill-mask", {"run": "clm", "text": "a [MASK]"})
    assert status == 422
    main(["fill-mask", runs["clm"], "a [MASK]"])
    assert answer["error"] in capsys.readouterr().err
    status, answer = request(server, "POST", "/api/generate", {"run": "mlm", "prompt": "the"})
    assert status == 422 and "cannot generate" in answer["error"]


def test_generate_streams_tokens_with_their_alternatives(server):
    body = {"run": "clm", "prompt": "the cat", "max_new_tokens": 6, "seed": 0,
            "ignore_eos": True, "top_k": 20}
    status, text = request(server, "POST", "/api/generate", body)
    assert status == 200
    events = sse_events(text)
    assert events[-1][0] == "done"
    tokens = [token for kind, data in events if kind == "token" for token in data["tokens"]]
    assert 1 <= len(tokens) <= 6
    assert all(len(t["alternatives"]) == 5 and 0 <= t["probability"] <= 1 for t in tokens)
    again = request(server, "POST", "/api/generate", body)[1]
    assert sse_events(again) == events  # the seed makes it reproducible


def test_generation_options_are_bounded_and_checked(server):
    status, answer = request(server, "POST", "/api/generate",
                             {"run": "clm", "prompt": "a", "max_new_tokens": 100_000})
    assert status == 400 and "max_new_tokens" in answer["error"]
    status, answer = request(server, "POST", "/api/generate",
                             {"run": "clm", "prompt": "a", "top_p": 2})
    assert status == 422 and "top_p" in answer["error"]


def test_attention_grids_come_from_the_mask_policy(server):
    text = "the cat\na dog"
    grids = {}
    for name in ("mlm", "clm", "prefix"):
        status, answer = request(server, "POST", "/api/attention",
                                 {"run": name, "text": text, "prefix_len": 2})
        assert status == 200
        grids[name] = answer["grids"][0]["allowed"]
    segments = answer["segments"]
    n = len(segments)
    same = [[segments[q] == segments[k] for k in range(n)] for q in range(n)]
    assert grids["mlm"] == same
    assert grids["clm"] == [[same[q][k] and k <= q for k in range(n)] for q in range(n)]
    assert grids["prefix"] == [[same[q][k] and (k <= q or k < 2) for k in range(n)]
                               for q in range(n)]


def test_span_corruption_shows_its_own_row_with_sentinels(server):
    status, answer = request(server, "POST", "/api/attention",
                             {"run": "span", "text": "the cat sees a bird and the dog runs"})
    assert status == 200
    (grid,) = answer["grids"]
    tokens, split = grid["tokens"], grid["prefix_len"]
    assert grid["kind"] == "span-corruption" and "<extra_id_0>" in tokens[:split]
    assert tokens[split] == "<extra_id_0>"  # the targets open with the first gap's sentinel
    n = len(tokens)
    assert grid["allowed"] == [[k <= q or k < split for k in range(n)] for q in range(n)]


def test_embed_gives_a_similarity_matrix(server):
    status, answer = request(server, "POST", "/api/embed",
                             {"run": "clm", "texts": ["the cat", "a dog", "the cat"]})
    assert status == 200
    similarity = answer["similarity"]
    assert similarity[0][2] == pytest.approx(1, abs=1e-5)
    assert similarity[0][1] == pytest.approx(similarity[1][0])
    assert request(server, "POST", "/api/embed", {"run": "clm", "texts": ["one"]})[0] == 400


def test_predict_answers_for_a_fine_tuned_run_only(server):
    status, answer = request(server, "POST", "/api/predict",
                             {"run": "classify", "texts": ["the cat good"]})
    assert status == 200
    assert set(answer["predictions"][0]["scores"]) == {"neg", "pos"}
    status, answer = request(server, "POST", "/api/predict", {"run": "mlm", "texts": ["a"]})
    assert status == 422 and "not fine-tuned" in answer["error"]


def test_qa_and_ner_answer_with_character_spans(server):
    context = "the dog sees a bird"
    status, answer = request(server, "POST", "/api/predict",
                             {"run": "qa", "texts": [f"which animal ? ||| {context}"]})
    prediction = answer["predictions"][0]
    assert status == 200 and context[prediction["start"]:prediction["end"]] == prediction["answer"]
    text = "the cat likes a dog"
    status, answer = request(server, "POST", "/api/predict", {"run": "ner", "texts": [text]})
    assert status == 200 and answer["task"] == "ner"
    for entity in answer["predictions"][0]["entities"]:
        assert text[entity["start"]:entity["end"]] == entity["word"]


def test_a_comparison_shows_its_report_and_is_not_a_model(server):
    status, page = request(server, "GET", "/report/comparison")
    assert status == 200 and page == "<h1>mlm against clm</h1>"
    status, answer = request(server, "GET", "/report/comparison-running")
    assert status == 404 and "no report yet" in answer["error"]
    assert request(server, "GET", "/report/..%2Fmlm")[0] == 404  # names, never paths
    status, answer = request(server, "POST", "/api/embed",
                             {"run": "comparison", "texts": ["a", "b"]})
    assert status == 422 and "is a comparison" in answer["error"]


def test_metrics_come_in_rows_from_a_given_row(server):
    status, answer = request(server, "GET", "/api/metrics?run=clm")
    assert status == 200 and answer["rows"][0]["kind"] == "train"
    later = request(server, "GET", f"/api/metrics?run=clm&after={answer['next'] - 1}")[1]
    assert later["rows"] == answer["rows"][-1:]


def test_metrics_name_the_lines_a_fine_tuned_run_draws(server):
    """A fine-tuned run validates its task's scores, not a loss: its lines are the training
    loss, the main metric on its own scale and the learning rate, every point a number."""
    for run, validation in [("classify", "validation accuracy"), ("ner", "validation f1"),
                            ("clm", "validation loss")]:
        answer = request(server, "GET", f"/api/metrics?run={run}")[1]
        lines = {line["name"]: line for line in answer["curves"]}
        assert list(lines) == ["train loss", validation, "learning rate"]
        assert [line["own"] for line in lines.values()] == [False, run != "clm", True]
        assert all(isinstance(value, float) for line in lines.values()
                   for _, value in line["points"])
        train_loss = [[row["step"], row["loss"]] for row in answer["rows"]
                      if row["kind"] == "train"]
        assert lines["train loss"]["points"] == train_loss and train_loss
        assert lines[validation]["points"]


@pytest.mark.parametrize("method, path, body, status", [
    ("POST", "/api/fill-mask", {"run": "nope", "text": "a"}, 404),
    ("POST", "/api/fill-mask", {"run": 99, "text": "a"}, 404),
    ("GET", "/api/metrics?run=nope", None, 404),
    ("POST", "/api/nothing", {}, 404),
    ("POST", "/api/fill-mask", {"run": "mlm"}, 400),
    ("POST", "/api/fill-mask", {"run": "mlm", "text": 3}, 400),
    ("POST", "/api/fill-mask", [1, 2], 400),
])
def test_bad_requests_get_a_json_error(server, method, path, body, status):
    answer = request(server, method, path, body)
    assert answer[0] == status and answer[1]["error"]


def test_malformed_json_is_a_400(server):
    status, answer = request(server, "POST", "/api/fill-mask", raw=b"{not json")
    assert status == 400 and "not JSON" in answer["error"]


def test_a_10_mb_body_is_refused_with_413(server):
    status, answer = request(server, "POST", "/api/embed", raw=b"x" * 10_000_000)
    assert status == 413 and "body" in answer["error"]


def test_generations_beyond_the_limit_are_refused_and_a_left_stream_stops(server, slow_model):
    slots = server.slots
    cancelled = slots.cancelled
    client = socket.create_connection(server.server_address[:2])
    body = json.dumps({"run": "clm", "prompt": "the", "max_new_tokens": 80,
                       "ignore_eos": True}).encode()
    client.sendall(b"POST /api/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                   b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    stream = client.makefile("rb")
    while stream.readline() != b"event: token\n":  # the headers, then the first token
        pass
    status, answer = request(server, "POST", "/api/generate", {"run": "clm", "prompt": "a"})
    assert status == 429 and "try again" in answer["error"]
    stream.close()
    client.close()  # the client leaves with some 70 tokens still to come
    deadline = time.monotonic() + 3  # far less than the 4 s the rest would take
    while slots.active and time.monotonic() < deadline:
        time.sleep(0.05)
    assert slots.active == 0 and slots.cancelled == cancelled + 1


def test_the_command_names_a_port_in_use_and_a_missing_run(runs, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", runs["clm"], "--port", str(port)]) == 1
    error = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is in use" in error and f"--port {port + 1}" in error
    assert len(error.strip().splitlines()) == 1
    assert main(["serve", "no/such/run"]) == 1
    assert "no such run directory" in capsys.readouterr().err
