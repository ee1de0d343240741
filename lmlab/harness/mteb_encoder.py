"""MTEB on a run: `RunEncoder` answers MTEB's encoder interface with the embeddings
`lmlab embed` makes (lmlab's model, tokenizer, pooling and normalisation), so a run is scored
whether or not it can be exported; `evaluate_mteb` runs MTEB's tasks with it. Similarity is
cosine, as a sentence-transformers export of the run declares it."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
from mteb import AbsTask, evaluate, get_task
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from lmlab.harness.offline import hub_offline
from lmlab.infer.embed import embed, embedding_reading
from lmlab.runs import Run


class RunEncoder(AbsEncoder):
    """A run as MTEB's encoder: each batch of texts embedded as `lmlab embed` embeds it."""

    def __init__(self, run: Run, pooling: str | None = None, batch_size: int = 32) -> None:
        run.require_tokenizer()
        self.model = run
        self.pooling, self.normalize = embedding_reading(run, pooling)
        self.batch_size = batch_size
        name = run.path.name if run.path is not None else "run"
        self.mteb_model_meta = ModelMeta.create_empty(overwrites=dict(
            name=f"lmlab/{name}", similarity_fn_name=ScoringFunction.COSINE,
            embed_dim=run.model.cfg.d_model, max_tokens=run.max_seq_len))

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str,
               prompt_type=None, **kwargs) -> np.ndarray:
        """(N, d_model) float32: the texts of MTEB's batches, embedded in order."""
        texts = [text for batch in inputs for text in batch["text"]]
        return embed(self.model, texts, self.pooling, self.normalize, self.batch_size)


def evaluate_mteb(run: Run, tasks: Sequence[str | AbsTask], pooling: str | None = None):
    """MTEB's results (a ModelResult) for `tasks` (names of MTEB's tasks, or task objects)
    on the run's embeddings. Task data is read offline, from local files or the datasets
    cache, and no results are cached."""
    encoder = RunEncoder(run, pooling)  # refusals come before any task is read
    with hub_offline():
        chosen = [task if isinstance(task, AbsTask) else _task(task) for task in tasks]
        try:
            return evaluate(encoder, chosen, cache=None, co2_tracker=False,
                            show_progress_bar=False)
        except ConnectionError as error:  # the hub, asked for data it would have to download
            raise ValueError(f"{str(error).splitlines()[0]}: lmlab reads task data offline, "
                             "from local files or what the datasets cache holds") from None


def _task(name: str) -> AbsTask:
    try:
        return get_task(name)
    except KeyError as error:  # MTEB's own message, with a close match where it has one
        raise ValueError(f"MTEB has no task {name!r}: {error.args[0]}") from None


def results_table(result) -> str:
    """One line per task, split and subset: its main score (--out holds every score)."""
    return "\n".join(f"{task.task_name}  {split}  {scores['hf_subset']}  main score "
                     f"{scores['main_score']:.4f}" for task in result.task_results
                     for split, subsets in task.scores.items() for scores in subsets)


def results_json(result) -> str:
    """Each task's results as MTEB writes them to its results files."""
    return json.dumps([task.to_dict() for task in result.task_results], indent=2,
                      default=str) + "\n"
