"""After an export: load the directory with `transformers` and compare its outputs with the
run's on the same inputs, so a wrong table or config shows up as a number, not later."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from lmlab.export.targets import Target
from lmlab.model import MaskSpec
from lmlab.model.heads import pools
from lmlab.model.selectors import Pooling
from lmlab.runs import Run
from lmlab.tasks.framing import closing_ids

ROWS, LENGTH = 3, 24


def sample_inputs(run: Run, seed: int = 0,
                  target: Target | None = None) -> tuple[Tensor, Tensor]:
    """Random ordinary tokens, rows right-padded to different lengths, as lmlab pads them;
    (ids, attention mask). A fine-tuned run's rows end as its fine-tuning ends them (with
    [SEP] or [EOS]), and the padding holds the id the export pads with (`target`'s, else the
    tokenizer's padding token): a decoder's sequence class finds each row's last token by it."""
    generator = torch.Generator().manual_seed(seed)
    ordinary = run.special.ordinary_ids()
    length = min(LENGTH, run.max_seq_len)
    ids = ordinary[torch.randint(len(ordinary), (ROWS, length), generator=generator)]
    lengths = torch.tensor([length, max(2, length * 2 // 3), max(2, length // 3)])
    attention_mask = (torch.arange(length) < lengths[:, None]).long()
    closing = closing_ids(run.special) if run.task is not None else []
    if closing:
        ids[torch.arange(ROWS), lengths - 1] = closing[0]
    pad = run.special.pad if target is None else target.pad_id(run.special)
    if pad is not None:
        ids = ids.masked_fill(attention_mask == 0, pad)
    return ids, attention_mask


@torch.no_grad()
def lmlab_outputs(run: Run, target: Target, ids: Tensor, attention_mask: Tensor) -> Tensor:
    """The run's outputs in the layout HF's class returns them, flattened to real tokens."""
    mask = MaskSpec("causal" if target.causal else "bidirectional", segment_ids=attention_mask)
    types = torch.zeros_like(ids) if run.model.cfg.type_vocab_size else None
    outputs = run.model(ids.to(run.device), mask.to(run.device), token_type_ids=
                        None if types is None else types.to(run.device),
                        predict_at=_pooled(run, attention_mask))
    real = attention_mask.bool()
    if not target.heads:
        return outputs["hidden"].cpu()[real].flatten()
    return torch.cat([_real(outputs[h].cpu(), real).flatten() for h in target.heads])


def pooling(kind: str, attention_mask: Tensor) -> Pooling:
    """(B, T) weights of a row's pooled vector: its first token, its last real one, or the
    mean of its real tokens."""
    weights = torch.zeros(attention_mask.shape)
    lengths = attention_mask.sum(dim=1)
    rows = torch.arange(len(lengths))
    if kind == "cls":
        weights[:, 0] = 1.0
    elif kind == "last":
        weights[rows, lengths - 1] = 1.0
    else:
        weights = attention_mask.float() / lengths[:, None]
    return Pooling(weights)


def _pooled(run: Run, attention_mask: Tensor) -> dict | None:
    """A fine-tuned sequence head's selector, pooling as the run was fine-tuned to."""
    if run.task is None or not pools(run.task.head):
        return None
    return {run.task.head: pooling(run.task.reading.pooling, attention_mask).map(
        lambda weights: weights.to(run.device))}


def _real(output: Tensor, real: Tensor) -> Tensor:
    """A head's output at the real tokens when it has one per token (B, T, n); a head's one
    output per row (B, n) whole."""
    return output[real] if output.dim() == 3 else output


@torch.no_grad()
def hf_outputs(model, target: Target, ids: Tensor, attention_mask: Tensor) -> Tensor:
    found = model(input_ids=ids, attention_mask=attention_mask)
    real = attention_mask.bool()
    kind = target.architecture.partition("For")[2]
    if target.architecture == "BertForPreTraining":  # ELECTRA's PreTraining has one output
        outputs = [found.prediction_logits[real], found.seq_relationship_logits]
    elif kind == "SequenceClassification":
        outputs = [found.logits]
    elif kind == "QuestionAnswering":
        outputs = [torch.stack((found.start_logits, found.end_logits), -1)[real]]
    else:
        outputs = [found.logits[real] if target.heads else found.last_hidden_state[real]]
    return torch.cat([t.flatten() for t in outputs])


def max_difference(run: Run, target: Target, out: Path) -> float:
    """The largest absolute difference between the run's outputs and those of the exported
    directory loaded by `transformers` (fp32, CPU)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    model = getattr(transformers, target.architecture).from_pretrained(
        out, attn_implementation="eager").eval()
    ids, attention_mask = sample_inputs(run, target=target)
    theirs = hf_outputs(model, target, ids, attention_mask)
    ours = lmlab_outputs(run, target, ids, attention_mask)
    if ours.shape != theirs.shape:
        raise ValueError(f"the exported model gives outputs of shape {tuple(theirs.shape)}, "
                         f"lmlab {tuple(ours.shape)}")
    return float((ours.float() - theirs.float()).abs().max())
