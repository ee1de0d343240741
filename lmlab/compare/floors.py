"""The bag-of-words floor of each classification probe of a comparison
(lmlab.tasks.bow_floor): fitted once per probe on its training rows and scored on its
scored split, since it does not depend on any pre-trained model. Where scikit-learn is
missing the floors are left out, said in one line: a comparison does not fail for an optional
extra."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from lmlab.compare.measures import probe_measure
from lmlab.tasks.bow_floor import NAME, floor_of_config, require_scikit_learn
from lmlab.tasks.named import NamedTask
from lmlab.tasks.traits import TASKS


@dataclass
class Floors:
    by_measure: dict[str, dict] = field(default_factory=dict)  # probe measure → its floor
    left_out: str | None = None  # why probes that have a floor have none here

    def values(self) -> dict[str, float]:
        """Probe measure → the floor's score on the probe's scored split."""
        return {measure: floor["value"] for measure, floor in self.by_measure.items()}

    def below(self, means: dict[tuple[str, str], float]) -> list[str]:
        """A warning for each probe on which every objective's score (`means`: (measure,
        objective) → mean at the full budget) is at or below its floor, and one for all of
        them: verdicts between such scores compare failures."""
        found = []
        for measure, floor in self.by_measure.items():
            scores = {o: mean for (m, o), mean in means.items() if m == measure}
            if scores and all(mean <= floor["value"] for mean in scores.values()):
                shown = ", ".join(f"{o} {mean:.4f}" for o, mean in scores.items())
                found.append(f"{measure}: every objective scored at or below the bag-of-words "
                             f"floor {floor['value']:.4f} ({shown})")
        if found and len(found) == len(self.by_measure):
            found.append("every probe scored below its bag-of-words floor: the models learned "
                         "less from the probes than word counts give, so the probes' verdicts "
                         "compare failures")
        return found

    def to_dict(self) -> dict:
        return {"baselines": self.by_measure,
                **({"baselines_left_out": self.left_out} if self.left_out else {})}


def probe_floors(probes: Sequence[NamedTask]) -> Floors:
    """The bag-of-words floor of every probe whose task has one."""
    wanted = [probe for probe in probes if TASKS[probe.task].bag_of_words_floor]
    if not wanted:
        return Floors()
    names = "probe" + "s" * (len(wanted) > 1) + " " + ", ".join(p.name for p in wanted)
    try:
        require_scikit_learn(f"the {NAME} floor of {names}")
    except ValueError as missing:
        print(f"{missing}; left out of the comparison", file=sys.stderr)
        return Floors(left_out=str(missing))
    found = {}
    for probe in wanted:
        floor = floor_of_config(probe.finetune_config())
        metric, split = floor["main_metric"], probe.scored_split
        found[probe_measure(probe.name, metric)] = {
            "probe": probe.name, "split": split, "metric": metric,
            "value": floor[split][metric], "floor": floor}
    return Floors(found)
