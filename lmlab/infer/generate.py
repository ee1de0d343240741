"""Text generation from a trained run, laid out as the model was trained to continue text.

    causal models (clm, mixes with clm)   the prompt, read causally, then continued
    prefix-LM models                      the prompt as a bidirectional prefix, then causal
    span-corruption models                T5 infilling: `prompt [EOS]` as the prefix, then
                                          `<extra_id_0> fill … [EOS]` generated (infill.py)

A model trained only bidirectionally (mlm, mlm+nsp, mntp) never learned to continue text and
refuses. Generation ends at [EOS], a stop string, `max_new_tokens` or the context's end; a model
whose tokenizer has no [EOS] runs to one of the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from lmlab.infer.decoding import decode
from lmlab.infer.infill import has_gaps, splice, split_spans, with_sentinels
from lmlab.infer.sampling import Sampling
from lmlab.infer.text_stream import IncrementalText
from lmlab.runs import Run
from lmlab.runs.reading import Text, as_batch, encode


@dataclass
class Generation:
    text: str | None  # the continuation, or for infilling the whole infilled text
    ids: list[int]  # generated token ids, without the closing [EOS]
    finish_reason: str  # "eos" | "stop" (a stop string) | "length" | "context" (window full)
    fills: list[str] | None = None  # infilling: each gap's text
    fill_ids: list[list[int]] | None = None  # infilling: each gap's token ids

    def __str__(self) -> str:
        return self.text if self.text is not None else " ".join(map(str, self.ids))


@dataclass
class PreparedPrompt:
    """One prompt as the model will read it."""

    ids: list[int]
    mode: str  # "causal" | "prefix" | "infill"
    gaps: int = 0  # infilling: the gaps to fill, sentinels 0 .. gaps-1 in `ids`

    @property
    def prefix_len(self) -> int:
        """Tokens read bidirectionally: none for causal models; for infilling all but the
        `<extra_id_0>` fed after the prefix, as the target sequence always starts with it."""
        return {"causal": 0, "prefix": len(self.ids), "infill": len(self.ids) - 1}[self.mode]


@dataclass
class _Row:
    """One sequence being generated."""

    prompt: PreparedPrompt
    text: IncrementalText | None
    ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None


def refusal(run: Run) -> str:
    return (f"{run.path}: the model was trained with {run.spec} only, which "
            "reads text bidirectionally and never learns to predict the next token, so it "
            "cannot generate; train with --objective clm, prefix or span, or a mix with clm "
            "such as mix:clm=1,mlm=15")


def generation_mode(run: Run, prompt: Text) -> str:
    """How `prompt` will be continued: "causal", "prefix" or "infill"."""
    modes = run.objective.generation_modes
    if not modes:
        raise ValueError(refusal(run))
    if "infill" in modes:
        if isinstance(prompt, str):
            gaps = has_gaps(prompt)
        else:
            gaps = bool(set(encode(run, prompt)) & set(run.special.sentinels))
        if gaps or not modes & {"causal", "prefix"}:
            return "infill"
    return "prefix" if "prefix" in modes else "causal"


def prepare_prompt(run: Run, prompt: Text, max_new_tokens: int = 1,
                   truncate_left: bool = False) -> PreparedPrompt:
    """The token ids the model will read for `prompt`, laid out as in training."""
    mode = generation_mode(run, prompt)
    special = run.special
    if mode != "infill":
        ids = encode(run, prompt)
        if not ids:
            raise ValueError("the prompt is empty; give at least one token to continue")
        return PreparedPrompt(_fit_context(run, ids, max_new_tokens, truncate_left), mode)
    if isinstance(prompt, str):
        marked, gaps = with_sentinels(prompt, len(special.sentinels))
        ids = encode(run, marked)
    else:
        ids = encode(run, prompt)
        gaps = sum(token in special.sentinels for token in ids)
        if not gaps:
            ids, gaps = [*ids, special.sentinels[0]], 1
    ids = [*ids, special.eos, special.sentinels[0]]
    if len(ids) > run.max_seq_len:
        raise ValueError(f"the prompt is {len(ids)} tokens with its sentinels, longer than the "
                         f"model's context of {run.max_seq_len}; shorten it (a prompt "
                         "to infill cannot be truncated)")
    return PreparedPrompt(ids, mode, gaps)


def _fit_context(run: Run, ids: list[int], max_new_tokens: int,
                 truncate_left: bool) -> list[int]:
    """The prompt, checked against the context; with `truncate_left`, its last tokens, leaving
    room for the new ones (at most half the context)."""
    context = run.max_seq_len
    if truncate_left:
        keep = context + 1 - min(max_new_tokens, context // 2)
        return ids[-keep:]
    if len(ids) > context:
        raise ValueError(f"the prompt is {len(ids)} tokens, longer than the model's context of "
                         f"{context}; shorten it or pass --truncate-left (truncate_left=True)")
    return ids


@dataclass(frozen=True)
class GenerationOptions:
    """Everything about a generation besides the prompts and `max_new_tokens`."""

    temperature: float = 1.0  # 0 = greedy
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    greedy: bool = False
    seed: int | None = None
    stop: Sequence[str] = ()  # strings that end a continuation (not included in it)
    num_samples: int = 1  # samples per prompt
    truncate_left: bool = False  # drop the prompt's start when it does not fit the context
    ignore_eos: bool = False  # generate exactly max_new_tokens (for timing)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):  # one stop string, not its characters
            object.__setattr__(self, "stop", (self.stop,))
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {self.num_samples}")
        sampling = self.sampling  # checks the sampling options
        if self.num_samples > 1 and sampling.is_greedy:
            raise ValueError(f"greedy decoding gives one continuation, so {self.num_samples} "
                             "samples would be identical; sample (temperature > 0) or ask for one")

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_k, self.top_p, self.repetition_penalty,
                        self.greedy)


def check_length(max_new_tokens: int) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")


def _start_rows(run: Run, prompts: list, max_new_tokens: int,
                options: GenerationOptions) -> list[_Row]:
    check_length(max_new_tokens)
    if options.stop and run.tokenizer is None:
        raise ValueError("stop strings need the run's tokenizer; this run has none")
    rows = []
    for prompt in prompts:
        prepared = prepare_prompt(run, prompt, max_new_tokens, options.truncate_left)
        for _ in range(options.num_samples):
            reads_text = run.tokenizer is not None and prepared.mode != "infill"
            text = IncrementalText(run.tokenizer, options.stop) if reads_text else None
            first = [run.special.sentinels[0]] if prepared.mode == "infill" else []
            rows.append(_Row(prepared, text, first))
    return rows


def _advance(row: _Row, token: int, run: Run, ignore_eos: bool) -> str:
    """Take one generated token; returns the text it made safe to show."""
    special = run.special
    ends = token == special.eos and not ignore_eos  # never without an [EOS]
    if row.prompt.mode == "infill" and token in special.sentinels[row.prompt.gaps:]:
        ends = True  # the model opened a gap that does not exist: every gap is filled
    if ends:
        row.finish_reason = "eos"
        return row.text.flush() if row.text is not None else ""
    row.ids.append(token)
    if row.text is None:
        return ""
    piece = row.text.push(token)
    if row.text.stopped:
        row.finish_reason = "stop"
    return piece


def _run(run: Run, rows: list[_Row], max_new_tokens: int, options: GenerationOptions,
         on_step: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
         ) -> Iterator[tuple[int, str]]:
    """Generate every row; yields (row index, text piece) as continuations become safe to
    show, and leaves each row's tokens and finish reason in `rows`."""
    generator = None
    if options.seed is not None:
        generator = torch.Generator(run.device).manual_seed(options.seed)
    prefix_lens = [row.prompt.prefix_len for row in rows]
    steps_taken = 0
    for tokens in decode(run.model, [row.prompt.ids for row in rows], options.sampling,
                         max_new_tokens, run.special.padding_id,
                         prefix_lens if any(prefix_lens) else None, generator, on_step):
        steps_taken += 1
        for index, (row, token) in enumerate(zip(rows, tokens.tolist(), strict=True)):
            if row.finish_reason is None:
                piece = _advance(row, token, run, options.ignore_eos)
                if piece:
                    yield index, piece
        if all(row.finish_reason is not None for row in rows):
            return
    for index, row in enumerate(rows):
        if row.finish_reason is None:
            row.finish_reason = "length" if steps_taken == max_new_tokens else "context"
            piece = row.text.flush() if row.text is not None else ""
            if piece:
                yield index, piece


def _result(run: Run, row: _Row) -> Generation:
    tokenizer = run.tokenizer
    if row.prompt.mode != "infill":
        text = row.text.text if row.text is not None else None
        return Generation(text, row.ids, row.finish_reason)
    spans = split_spans(row.ids, run.special, row.prompt.gaps)
    if tokenizer is None:
        return Generation(None, row.ids, row.finish_reason, None, spans)
    source = row.prompt.ids[:-2]  # without the [EOS] and `<extra_id_0>` that follow the text
    text = tokenizer.decode(splice(source, spans, run.special))
    fills = [tokenizer.decode(span) for span in spans]
    return Generation(text, row.ids, row.finish_reason, fills, spans)


def generate(run: Run, prompts: Text | Sequence[Text], max_new_tokens: int = 50,
             on_text: Callable[[int, str], None] | None = None,
             **options) -> Generation | list[Generation]:
    """Continue (or infill) one prompt or a batch of prompts; `options` are the fields of
    GenerationOptions (temperature, top_k, top_p, repetition_penalty, greedy, seed, stop,
    num_samples, truncate_left, ignore_eos).

    Returns a Generation for one prompt and one sample; otherwise a list, `num_samples` per
    prompt, prompt by prompt. `on_text(row, piece)` receives continuation text as soon as it
    is safe to print.
    """
    settings = GenerationOptions(**options)
    items, single = as_batch(prompts)
    rows = _start_rows(run, items, max_new_tokens, settings)
    for index, piece in _run(run, rows, max_new_tokens, settings):
        if on_text is not None:
            on_text(index, piece)
    results = [_result(run, row) for row in rows]
    return results[0] if single and settings.num_samples == 1 else results


def stream(run: Run, prompt: Text, max_new_tokens: int = 50,
           on_step: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
           **options) -> Iterator[str]:
    """Yield the continuation of one prompt piece by piece as it is generated (an infilled
    text comes whole at the end); `options` as for `generate`, one sample. `on_step(logits,
    chosen)` sees every step's (1, V) logits and chosen token, before the piece it makes."""
    settings = GenerationOptions(**options)
    items, single = as_batch(prompt)
    if not single or settings.num_samples != 1:
        raise ValueError("stream takes one prompt and gives one sample; use generate for more")
    run.require_tokenizer()  # the pieces are text
    rows = _start_rows(run, items, max_new_tokens, settings)
    for _, piece in _run(run, rows, max_new_tokens, settings, on_step):
        yield piece
    if rows[0].prompt.mode == "infill":
        yield str(_result(run, rows[0]))
