"""The API's answers that come whole (everything but generation), each from the library
function the command line uses, so a run answers the page as it answers the CLI."""

from __future__ import annotations

from dataclasses import asdict

import torch

from lmlab.infer.embed import embed as vectors_of
from lmlab.infer.fill_mask import fill_mask as fill
from lmlab.infer.predict import predict as predictions
from lmlab.model import MaskSpec
from lmlab.objectives.registry import build_objective
from lmlab.runs.metrics import metrics_rows
from lmlab.runs.reading import encode, reading_document
from lmlab.serve.curves import curves
from lmlab.serve.errors import ApiError
from lmlab.serve.fields import bounded, field, texts
from lmlab.serve.runs import ServedRun, attention_policies, token_texts

MAX_TOP_K = 50
MAX_GRID_TOKENS = 128  # a grid is tokens² cells


def fill_mask(served: ServedRun, body: dict) -> dict:
    text = field(body, "text", str)
    top_k = bounded(body, "top_k", 5, 1, MAX_TOP_K)
    masks = fill(served.run, text, top_k)
    return {"text": text, "masks": [[asdict(c) for c in mask] for mask in masks]}


def embed(served: ServedRun, body: dict) -> dict:
    given = texts(body, least=2)
    pooling = field(body, "pooling", str, None)  # None: as the run records, else mean
    vectors = torch.from_numpy(vectors_of(served.run, given, pooling, normalize=True))
    return {"texts": given, "similarity": (vectors @ vectors.T).tolist()}


def predict(served: ServedRun, body: dict) -> dict:
    given = texts(body)
    results = predictions(served.run, given, all_scores=True)
    return {"task": served.task, "texts": given, "predictions": results}


def attention(served: ServedRun, body: dict) -> dict:
    """Who may attend to whom in `text` (one document per line, packed into one row as in
    training) under each policy the run trained with; the cells are MaskSpec.allowed, the
    model's own mask. A prefix policy splits at `prefix_len` (default: half the row); span
    corruption shows the row its objective makes, sentinels in place, with its own split."""
    run = served.run
    documents = [line for line in field(body, "text", str).splitlines() if line.strip()]
    if not documents:
        raise ApiError(400, "'text' is empty")
    ids, segments = [], []
    for number, document in enumerate(documents, 1):
        row = reading_document(run, encode(run, document))[0]
        ids += row
        segments += [number] * len(row)
    if len(ids) > MAX_GRID_TOKENS:
        raise ApiError(400, f"the text is {len(ids)} tokens; the grid shows at most "
                       f"{MAX_GRID_TOKENS}")
    split = bounded(body, "prefix_len", max(1, len(ids) // 2), 1, len(ids))
    grids = []
    for policy in field(body, "kinds", list, attention_policies(run)):
        if policy == "span-corruption":
            grids.append(_span_grid(run, ids))
            continue
        if policy not in ("bidirectional", "causal", "prefix"):
            raise ApiError(400, f"unknown attention policy {policy!r}")
        prefix = torch.tensor([split]) if policy == "prefix" else None
        spec = MaskSpec(policy, prefix_len=prefix, segment_ids=torch.tensor([segments]))
        grids.append({"kind": policy, "allowed": spec.allowed(len(ids), len(ids))[0].tolist()})
    return {"tokens": token_texts(run, ids), "segments": segments, "prefix_len": split,
            "grids": grids}


def _span_grid(run, ids: list[int]) -> dict:
    """The row span corruption trains on for `ids` (spans drawn with a fixed seed): the
    corrupted text and its targets, and the mask the objective gives that row."""
    leaves = [leaf for leaf in run.objective.leaves() if leaf.traits.generation == "infill"]
    objective = leaves[0] if leaves else build_objective("span", run.special)
    batch = objective.make_batch(torch.tensor([ids]), torch.Generator().manual_seed(0))
    length = int((batch.mask.segment_ids[0] > 0).sum())  # the row without its padding
    allowed = batch.mask.allowed(len(ids), len(ids))[0, :length, :length]
    return {"kind": "span-corruption", "allowed": allowed.tolist(),
            "tokens": token_texts(run, batch.input_ids[0, :length].tolist()),
            "prefix_len": int(batch.mask.prefix_len[0])}


def metrics(served: ServedRun, after: int) -> dict:
    """The rows of the run's metrics.jsonl from row `after` on, for curves that poll."""
    if not served.metrics_path.is_file():
        raise ApiError(404, f"run {served.name!r} has no metrics")
    rows, following = metrics_rows(served.run.path, after)
    return {"rows": rows, "next": following,
            "curves": curves(rows, served.main_metric)}
