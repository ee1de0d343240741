"""lm-evaluation-harness on a run: `RunLM` answers lm-eval's language-model interface with
lmlab's own model, tokenizer, scoring (eval/) and generation (infer/), so any run that predicts
the next token is scored, whether or not it can be exported; `evaluate_tasks` runs lm-eval's
tasks with it.

Requests are read exactly as lm-eval's own `hf` model reads them (TemplateLM's split of a
context from its continuation, its rolling windows for perplexity, its stop strings and prompt
truncation for generation), so an exported run gets the same scores from both."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from lm_eval import simple_evaluate
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs
from lm_eval.tasks import TaskManager
from lm_eval.utils import (
    get_rolling_token_windows,
    handle_non_serializable,
    make_disjoint_window,
    make_table,
)

from lmlab.eval.evaluate import next_token_rule, score_continuations
from lmlab.eval.windows import DEFAULT_BATCH_TOKENS
from lmlab.harness.offline import hub_offline
from lmlab.infer.generate import generate
from lmlab.runs import Run
from lmlab.runs.reading import encode

MAX_GEN_TOKENS = 256  # a generation task's default, as lm-eval's hf model has it
GENERATION_BATCH = 32  # prompts continued together
# lm-eval's generation options (after normalize_gen_kwargs) lmlab's generation takes
SAMPLING_OPTIONS = {"do_sample", "temperature", "top_k", "top_p", "repetition_penalty"}


class RunLM(TemplateLM):
    """A run as lm-eval's LM: log-likelihoods, rolling log-likelihoods and generations."""

    def __init__(self, run: Run, batch_tokens: int = DEFAULT_BATCH_TOKENS) -> None:
        super().__init__()
        next_token_rule(run)  # refuses a run that cannot score continuations
        run.require_tokenizer()
        if run.special.eos is None:
            raise ValueError(f"{run.path}: lm-eval needs an end-of-text token, and the run's "
                             "tokenizer has no [EOS]")
        self.run, self.batch_tokens = run, batch_tokens

    @property
    def eot_token_id(self) -> int:
        return self.run.special.eos

    @property
    def prefix_token_id(self) -> int:
        """What an empty context and a text's first window are conditioned on: [BOS] when the
        tokenizer has one, else [EOS], as lm-eval's hf model chooses."""
        special = self.run.special
        return special.bos if special.bos is not None else special.eos

    @property
    def max_length(self) -> int:
        return self.run.max_seq_len

    def tok_encode(self, string: str, add_special_tokens: bool | None = None,
                   **kwargs) -> list[int]:
        return encode(self.run, string)  # as training read text: no framing tokens added

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False,
                              **kwargs) -> list[tuple[float, bool]]:
        """Each ((context, continuation) texts, context ids, continuation ids) request's
        log-likelihood and whether its continuation was the greedy one."""
        scores = score_continuations(self.run, [(c, t) for _, c, t in requests],
                                     self.batch_tokens, progress=not disable_tqdm)
        return [(float(nats), bool(top1 == count)) for nats, top1, count in
                zip(scores.log_likelihood, scores.top1, scores.predictions, strict=True)]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Each text's log-likelihood, read in lm-eval's disjoint windows of the context."""
        windows, owners = [], []
        for index, (text,) in enumerate(request.args for request in requests):
            for window in get_rolling_token_windows(self.tok_encode(text), self.prefix_token_id,
                                                    self.max_length, context_len=1):
                windows.append(make_disjoint_window(window))
                owners.append(index)
        totals = np.zeros(len(requests))
        if windows:
            scores = score_continuations(self.run, windows, self.batch_tokens,
                                         progress=not disable_tqdm)
            np.add.at(totals, owners, scores.log_likelihood)
        return totals.tolist()

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Each (context, generation options) request's continuation, cut before the first
        stop string; requests with the same options are continued together."""
        eos = self.run.tokenizer.decode([self.eot_token_id], skip_special_tokens=False)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(repr(sorted(request.args[1].items())), []).append(index)
        texts: list[str] = [""] * len(requests)
        for indices in groups.values():
            options = normalize_gen_kwargs(requests[indices[0]].args[1], MAX_GEN_TOKENS)
            stop = handle_stop_sequences(options.pop("until", None), eos=eos)
            new_tokens = options.pop("max_gen_toks")
            prompts = [self._prompt(requests[i].args[0], new_tokens) for i in indices]
            for first in range(0, len(indices), GENERATION_BATCH):
                batch = prompts[first:first + GENERATION_BATCH]
                found = generate(self.run, batch, new_tokens, stop=stop, **_sampling(options))
                for i, generation in zip(indices[first:], found, strict=False):
                    texts[i] = generation.text
        return texts

    def _prompt(self, context: str, new_tokens: int) -> list[int]:
        """The context's last tokens, leaving room for `new_tokens`, as lm-eval truncates."""
        room = self.max_length - new_tokens
        if room < 1:
            raise ValueError(f"a generation of up to {new_tokens} tokens leaves no room for its "
                             f"prompt in the model's context of {self.max_length}")
        return self.tok_encode(context)[-room:]


def _sampling(options: dict) -> dict:
    """lmlab's generation options for lm-eval's normalized ones."""
    unknown = sorted(set(options) - SAMPLING_OPTIONS)
    if unknown:
        raise ValueError(f"lmlab cannot generate with the task's {', '.join(unknown)}; it "
                         f"takes {', '.join(sorted(SAMPLING_OPTIONS))}")
    if not options["do_sample"]:
        return {"greedy": True}
    return {name: options[name] for name in ("temperature", "top_k", "top_p",
                                            "repetition_penalty") if name in options}


def evaluate_tasks(run: Run, tasks: Sequence[str], include: str | Path | None = None,
                   batch_tokens: int = DEFAULT_BATCH_TOKENS) -> dict:
    """lm-eval's results for `tasks` (names of its own tasks, or of task YAMLs under
    `include`) on `run`, as `lm_eval.simple_evaluate` returns them, its samples left out.
    Task data is read from local files or the datasets cache, never downloaded."""
    with hub_offline():
        manager = TaskManager(include_path=str(include) if include is not None else None)
        unknown = [task for task in tasks if not manager.match_tasks([task])]
        if unknown:
            raise ValueError(f"lm-eval has no task {', '.join(map(repr, unknown))}"
                             + ("" if include else "; add --harness-include DIR for task "
                                                   "YAMLs of your own"))
        model = RunLM(run, batch_tokens)
        try:
            return simple_evaluate(model=model, tasks=list(tasks), task_manager=manager,
                                   log_samples=False)
        except ConnectionError as error:  # the hub, asked for data it would have to download
            raise ValueError(f"{str(error).splitlines()[0]}: lmlab reads task data offline, "
                             "from local files or what the datasets cache holds") from None


def results_table(results: dict) -> str:
    """lm-eval's own table of the results, with its table of groups when tasks form some."""
    tables = [make_table(results)]
    if results.get("groups"):
        tables.append(make_table(results, "groups"))
    return "\n".join(tables)


def results_json(results: dict) -> str:
    """The results as lm-eval writes them to its results file."""
    return json.dumps(results, indent=2, default=handle_non_serializable,
                      ensure_ascii=False) + "\n"
