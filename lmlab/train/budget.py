"""How long a run trains: steps, tokens ("20M", "chinchilla") or minutes, whichever ends first."""

from __future__ import annotations

import math

SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
CHINCHILLA_TOKENS_PER_PARAMETER = 20  # Hoffmann et al. 2022
DEFAULT_MINUTES = 5.0


def parse_count(text: str) -> int:
    """'20M' → 20_000_000; plain integers and scientific notation also accepted."""
    clean = text.strip().lower().replace("_", "")
    scale = SUFFIXES.get(clean[-1:], 1)
    try:
        return int(float(clean[:-1] if scale != 1 else clean) * scale)
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a token count (try 20M or chinchilla)") from None


def format_count(count: float) -> str:
    """20_000_000 → '20M', 1_234 → '1.23k': three significant digits, readable by
    parse_count."""
    rounded = float(f"{count:.3g}")  # 999_999 is 1M, not 1e+03k
    for suffix, scale in sorted(SUFFIXES.items(), key=lambda item: -item[1]):
        if abs(rounded) >= scale:
            return f"{rounded / scale:.3g}{suffix.upper() if suffix != 'k' else suffix}"
    return f"{rounded:.3g}"


def step_budget(steps: int | None, tokens: str | None, parameters: int,
                tokens_per_step: int) -> int | None:
    """The steps allowed by the step and token budgets, or None when neither is set."""
    limits = [steps] if steps else []
    if tokens:
        count = (CHINCHILLA_TOKENS_PER_PARAMETER * parameters if tokens == "chinchilla"
                 else parse_count(tokens))
        limits.append(math.ceil(count / tokens_per_step))
    return min(limits) if limits else None


def steps_in_minutes(minutes: float, seconds_per_step: float) -> int:
    return max(1, int(minutes * 60 / seconds_per_step))
