"""A sequence (`then:A,B@FRACTION`) is measured on what its phases taught together; where one
phase ran only a handful of steps it taught too little to be measured, and a verdict on the
run would credit or blame it for the other phase alone. Such verdicts say so instead."""

from __future__ import annotations

from lmlab.objectives.sequence import switch_step

MIN_PHASE_STEPS = 20  # fewer optimiser steps than this: a phase too short to be measured


def phases(spec: str, steps: int) -> list[tuple[str, int]]:
    """(objective, steps) of each phase of a run of `spec` over `steps` steps: one phase for
    anything but a sequence. `then:clm,mlm@0.9` over 50 steps → [(clm, 45), (mlm, 5)]."""
    kind, _, rest = spec.partition(":")
    if kind != "then" or "@" not in rest:
        return [(spec, steps)]
    names, _, fraction = rest.rpartition("@")
    first, _, second = names.partition(",")
    switch = switch_step(float(fraction), steps)
    return [(first, switch), (second, steps - switch)]


def too_short(ledger: list[dict], fraction: float) -> dict[str, str]:
    """Objective → why its runs at budget `fraction` cannot be measured, for each whose phase
    ran fewer than MIN_PHASE_STEPS steps in some seed's run."""
    found = {}
    for entry in ledger:
        # a run of no steps (the control) trained nothing by design: it is measured as it came
        if entry["fraction"] != fraction or entry["objective"] in found or not entry["steps"]:
            continue
        for phase, steps in phases(entry["objective"], entry["steps"]):
            if steps < MIN_PHASE_STEPS:
                found[entry["objective"]] = (
                    f"no verdict: the {phase} phase of {entry['objective']} ran {steps} "
                    f"step{'s' if steps != 1 else ''} (seed {entry['seed']}), too short to be "
                    f"measured (at least {MIN_PHASE_STEPS}); give a larger --budget")
                break
    return found
