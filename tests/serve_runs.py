"""Tiny runs for the `lmlab serve` tests: masked, causal, prefix, span and a fine-tuned
classifier, two training steps each on a toy text (enough for every path, not for good
answers)."""

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from lmlab.cli import main
from lmlab.data.dataset import in_memory_dataset
from lmlab.data.tokenizer import special_tokens_of, train_tokenizer
from lmlab.serve.runs import RunTable
from lmlab.serve.server import PlaygroundServer
from lmlab.train.config import TrainConfig
from lmlab.train.pretrain import pretrain

WORDS = ["the", "cat", "dog", "sees", "likes", "a", "bird", "runs", "home", "fast", "good",
         "bad"]
OBJECTIVES = ["mlm", "clm", "prefix", "span"]


def toy_dataset(rng: random.Random, sentences: int = 600):
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(5, 30))) + "." for _ in range(sentences)]
    tokenizer = train_tokenizer(texts, vocab_size=300, n_sentinels=8)
    ids = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    held_out = sentences // 6
    dataset = in_memory_dataset(ids[held_out:], ids[:held_out], special_tokens_of(tokenizer))
    dataset.tokenizer_json = tokenizer.to_str()
    return dataset


def make_runs(root: Path) -> dict[str, str]:
    """Run name → run directory: mlm, clm, prefix, span, and `classify` fine-tuned from mlm."""
    rng = random.Random(0)
    dataset = toy_dataset(rng)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy machine
    try:
        made = {objective: str(pretrain(TrainConfig(
            objective=objective, model="gpt2-tiny", seq_len=96, out=str(root / objective),
            batch_size=8, steps=2, eval_every=2, log_every=1), dataset))
            for objective in OBJECTIVES}
        labelled = root / "sentiment.tsv"
        labelled.write_text("label\tsentence\n" + "".join(
            f"{rng.choice(['pos', 'neg'])}\t{' '.join(rng.choices(WORDS, k=5))}\n"
            for _ in range(32)))
        made["classify"] = str(root / "classify")
        assert main(["finetune", made["mlm"], "--task", "classify", "--train", str(labelled),
                     "--validation", str(labelled), "--out", made["classify"], "--steps", "2",
                     "--batch-size", "16"]) == 0
    finally:
        torch.set_num_threads(threads)
    return made


@contextmanager
def serving(runs: dict[str, str], max_generations: int = 1) -> Iterator[PlaygroundServer]:
    """The runs served from a thread, on a free port."""
    server = PlaygroundServer(RunTable.load([Path(path) for path in runs.values()]), port=0,
                              max_generations=max_generations)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
