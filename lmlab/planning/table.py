"""A plan (lmlab.planning.sizing) as a table for the terminal."""

from __future__ import annotations

from lmlab.config.budget import format_count
from lmlab.eval.report import text_table
from lmlab.planning.compute_budget import ComputeBudget
from lmlab.planning.sizing import USEFUL_PASSES, Candidate, Plan
from lmlab.planning.timing import MIN_TIMING_SECONDS, TIMING_SHARE

HEADER = ["model", "parameters", "non-embedding", "FLOPs/token", "tokens/s", "tokens",
          "minutes", "tokens/param", "passes", "fit: loss above best"]


def format_plan(plan: Plan) -> str:
    data = plan.data or "the built-in corpus"
    lines = [f"objective {plan.objective}, budget {_budget(plan.budget)}, seq-len "
             f"{plan.seq_len}, batch size {plan.batch_size}, {plan.precision} on {plan.device}",
             f"data: {data}, {plan.training_tokens:,} training tokens",
             f"timing took {plan.timing_seconds:.1f} s of the {plan.timing_allowance_seconds:.3g} "
             f"s allowed ({TIMING_SHARE:.0%} of the budget's time, at least "
             f"{MIN_TIMING_SECONDS:g} s)", ""]
    rows = [_row(c, c.model == plan.recommended) for c in plan.candidates]
    lines += text_table(HEADER, rows)
    lines += ["", f"* recommended; ! more than {USEFUL_PASSES} passes over the data", ""]
    if plan.optimum is not None:
        best = plan.optimum
        lines.append(f"compute-optimal for {best.flops:.3g} FLOPs under the fit: "
                     f"{format_count(best.parameters)} parameters, {format_count(best.tokens)} "
                     f"tokens")
    lines.append("fit: loss above best = the Chinchilla fit's loss L(N, D) for the candidate less "
                 "the lowest among these candidates, in nats: it compares candidates only, and "
                 "is no loss a run will show (Besiroglu et al. 2024's refit of Hoffmann et al. "
                 "2022, to causal LMs of 70M-16B parameters on 5B-500B tokens of MassiveText "
                 "with its tokenizer)")
    lines += [f"warning: {warning}" for warning in plan.warnings]
    if not plan.fits:
        lines.append(_what_the_smallest_needs(plan))
    return "\n".join([*lines, "", plan.command])


def _budget(budget: ComputeBudget) -> str:
    if budget.kind == "minutes":
        return f"{budget.amount:g} minutes"
    if budget.kind == "flops":
        return f"{budget.amount:.3g} FLOPs"
    return f"{format_count(budget.amount)} tokens"


def _row(c: Candidate, recommended: bool) -> list[str]:
    measured = c.seconds_per_step is not None
    return [
        c.model + (" *" if recommended else ""), format_count(c.parameters),
        format_count(c.non_embedding_parameters), f"{c.flops_per_token:.3g}",
        format_count(c.tokens_per_second) if measured else "-",
        format_count(c.tokens), f"{c.minutes:.1f}" if measured else "-",
        f"{c.tokens_per_parameter:.3g}",
        format_count(c.passes) + ("!" if c.passes > USEFUL_PASSES else ""),
        "-" if c.fit_loss_above_best is None else f"+{c.fit_loss_above_best:.3f}",
    ]


def _what_the_smallest_needs(plan: Plan) -> str:
    """The line under a plan whose budget no candidate fits as timed."""
    (smallest,) = (c for c in plan.candidates if c.model == plan.recommended)
    said = (f"no candidate fits the budget as timed; the command trains the smallest, "
            f"{smallest.model}")
    if plan.needed_minutes is None:
        return f"{said}, though not a step of it could be timed"
    step = (f"{smallest.seconds_per_step:.3g} s a step" if smallest.seconds_per_step else
            f"about {smallest.estimated_seconds_per_step:.3g} s a step, estimated from one row")
    return f"{said}, for about {plan.needed_minutes:.3g} minutes here ({step})"
