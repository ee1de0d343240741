"""Streaming speed of `lmlab serve`: time to the first token and tokens per second through
POST /api/generate (server-sent events, read by an HTTP client as the page reads them) against
the same generation called directly (`lmlab.infer.generate.stream`, what `lmlab generate`
prints from), on the same run with the same settings. The server is `lmlab serve` in a process
of its own, as a browser would meet it.

Reference: a gpt2-mini clm run (4 layers, d_model 256) trained for one step on a toy text, a
short prompt, greedy decoding of exactly 128 new tokens, one CPU thread (the thread policy of
both commands for one prompt). Repeats alternate which side goes first; medians give the ratios
(served / direct: time to first token, lower is better; tokens per second, higher is better).

    python benchmarks/serve_speed.py
    python benchmarks/serve_speed.py --run runs/clm --repeats 9
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from record import machine, write_results

from lmlab.infer.generate import stream
from lmlab.kernels.machine import threads_for
from lmlab.runs import load_run

PROMPT, NEW_TOKENS = "the cat sees a bird and", 128
SETTINGS = {"greedy": True, "ignore_eos": True}


def toy_run(root: Path) -> Path:
    """A gpt2-mini clm run with a tokenizer, one training step on a toy text."""
    from lmlab.config.training import TrainConfig
    from lmlab.data.dataset import in_memory_dataset
    from lmlab.data.preparation.tokenizer_training import train_tokenizer
    from lmlab.data.tokenizer import special_tokens_of
    from lmlab.train.entry import pretrain

    words = "the cat dog sees likes a bird runs home fast good bad".split()
    rng = random.Random(0)
    texts = [" ".join(rng.choices(words, k=rng.randint(5, 30))) + "." for _ in range(2000)]
    tokenizer = train_tokenizer(texts, vocab_size=512)
    ids = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    dataset = in_memory_dataset(ids[200:], ids[:200], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    return pretrain(TrainConfig(objective="clm", model="gpt2-mini", seq_len=256,
                                out=str(root / "clm"), batch_size=8, steps=1), dataset)


def direct(run) -> tuple[float, float, int]:
    """(seconds to the first piece, seconds in all, tokens) of one direct generation."""
    start = time.perf_counter()
    first, steps = None, []
    for _ in stream(run, PROMPT, NEW_TOKENS, on_step=lambda *step: steps.append(step),
                    **SETTINGS):
        first = first or time.perf_counter() - start
    return first, time.perf_counter() - start, len(steps)


@contextmanager
def serving(path: Path) -> Iterator[int]:
    """`lmlab serve RUN` on a free port; yields the port."""
    server = subprocess.Popen([sys.executable, "-m", "lmlab", "serve", str(path), "--port", "0",
                               "--device", "cpu"], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()  # "serving NAME at http://127.0.0.1:PORT (…)"
        yield int(line.split("http://")[1].split()[0].rsplit(":", 1)[1])
    finally:
        server.terminate()
        server.wait()


def served(port: int, name: str) -> tuple[float, float, int]:
    """The same through the API: the first token event, the `done` event, tokens counted."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    body = json.dumps({"run": name, "prompt": PROMPT, "max_new_tokens": NEW_TOKENS, **SETTINGS})
    start = time.perf_counter()
    connection.request("POST", "/api/generate", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    first, tokens = None, 0
    for line in response:
        if line.startswith(b"data: ") and line != b"data: {}\n":
            first = first or time.perf_counter() - start
            tokens += len(json.loads(line[6:])["tokens"])
    total = time.perf_counter() - start
    connection.close()
    return first, total, tokens


def measure(sides: dict, repeats: int) -> dict[str, list[tuple[float, float, int]]]:
    for side in sides.values():
        side()  # warm-up
    results = {name: [] for name in sides}
    for repeat in range(repeats):
        for name in (list(sides) if repeat % 2 == 0 else reversed(list(sides))):
            results[name].append(sides[name]())
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a run that generates; default: a toy one")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_speed.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, threads_for(1):
        path = Path(args.run or toy_run(Path(scratch)))
        run = load_run(path)
        with serving(path) as port:
            results = measure({"direct": lambda: direct(run),
                               "served": lambda: served(port, path.resolve().name)},
                              args.repeats)
    summary = {side: {"first_token_seconds": statistics.median(r[0] for r in rows),
                      "tokens_per_second": statistics.median(r[2] / r[1] for r in rows),
                      "tokens": rows[0][2], "runs": rows}
               for side, rows in results.items()}
    ratios = {"first_token": summary["served"]["first_token_seconds"]
              / summary["direct"]["first_token_seconds"],
              "tokens_per_second": summary["served"]["tokens_per_second"]
              / summary["direct"]["tokens_per_second"]}
    for side, row in summary.items():
        print(f"{side:>6}: first token {1000 * row['first_token_seconds']:6.1f} ms, "
              f"{row['tokens_per_second']:6.0f} tokens/s")
    print(f"served / direct: first token {ratios['first_token']:.2f}, "
          f"tokens/s {ratios['tokens_per_second']:.2f}")
    report = {"run": str(args.run or "toy gpt2-mini clm"), "prompt": PROMPT,
              "new_tokens": NEW_TOKENS, "settings": SETTINGS, "threads": 1,
              "repeats": args.repeats, "machine": machine(), "load_average": os.getloadavg(),
              "ratios": ratios, **summary}
    write_results(args.out, report)


if __name__ == "__main__":
    main()
