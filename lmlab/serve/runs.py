"""The runs a server was started with, addressed by name or index, and the comparisons whose
reports it shows: the only models (and the only files) a request can reach."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from lmlab.compare.layout import DESIGN, REPORT
from lmlab.runs import Run, load_run
from lmlab.runs.layout import METRICS
from lmlab.serve.errors import ApiError
from lmlab.tasks.formats import TEXT_SEPARATOR
from lmlab.tasks.traits import TASKS


@dataclass
class ServedRun:
    name: str
    run: Run

    @property
    def task(self) -> str | None:
        """The fine-tuned task's kind (classify, qa, ner, …), None for a pre-trained run."""
        return None if self.run.task is None else self.run.task.name

    @property
    def main_metric(self) -> str | None:
        """The metric a fine-tuned run's best checkpoint is best at; None for a pre-trained
        run (its best has the lowest validation loss)."""
        return None if self.task is None else TASKS[self.task].main_metric

    @property
    def metrics_path(self) -> Path:
        return self.run.path / METRICS

    def describe(self, index: int) -> dict:
        objective = self.run.objective
        fills = (objective.fill_mask_head is not None
                 and objective.fill_mask_head[0] in self.run.model.heads)
        return {
            "index": index, "name": self.name, "objective": self.run.spec,
            "task": self.task, "context": self.run.max_seq_len,
            # a continued pre-training's source: {run (relative to this run), checkpoint,
            # weights_sha256}
            "init": None if self.run.config.init is None else self.run.config.init.to_json(),
            # how a task's two texts (a question and its context, a pair) join into one text
            "separator": TEXT_SEPARATOR if self.task is not None
            and TASKS[self.task].second_text == "required" else None,
            "attention": attention_policies(self.run),
            "can": {"fill_mask": fills and self.task is None,
                    "generate": objective.can_generate and self.task is None,
                    "embed": True, "predict": self.task is not None,
                    "metrics": self.metrics_path.is_file()},
        }


def attention_policies(run: Run) -> list[str]:
    """Each attention policy the run's objective trained with, once, in the objective's order:
    a MaskSpec kind, or "span-corruption" (a prefix over the corrupted text)."""
    return list(dict.fromkeys("span-corruption" if leaf.traits.generation == "infill"
                              else leaf.traits.attention for leaf in run.objective.leaves()))


def token_texts(run: Run, token_ids: list[int]) -> list[str]:
    """Each token's own text (special tokens by name); its id for a run without a tokenizer."""
    if run.tokenizer is None:
        return [str(token) for token in token_ids]
    return run.tokenizer.decode_batch([[token] for token in token_ids],
                                      skip_special_tokens=False)


@dataclass
class ServedComparison:
    """A directory `lmlab compare` writes: its report is shown once the comparison ends."""

    name: str
    path: Path

    @property
    def report_path(self) -> Path:
        return self.path / REPORT

    def describe(self) -> dict:
        finished = self.report_path.is_file()
        return {"name": self.name, "finished": finished,
                "report": f"/report/{quote(self.name)}" if finished else None}

    def report(self) -> bytes:
        if not self.report_path.is_file():
            raise ApiError(404, f"comparison {self.name!r} has no report yet; `lmlab compare` "
                           "writes it when its last sub-run is scored")
        return self.report_path.read_bytes()


class RunTable:
    def __init__(self, runs: dict[str, Run], comparisons: dict[str, Path] | None = None) -> None:
        self.served = [ServedRun(name, run) for name, run in runs.items()]
        self.comparisons = [ServedComparison(name, path)
                            for name, path in (comparisons or {}).items()]

    @classmethod
    def load(cls, paths: list[Path], device: str = "cpu") -> RunTable:
        """Each run or comparison by its directory's name; a repeated name gets its position
        appended."""
        runs: dict[str, Run] = {}
        comparisons: dict[str, Path] = {}
        for index, path in enumerate(paths):
            name = path.resolve().name
            if name in runs or name in comparisons:
                name = f"{name}-{index}"
            if (path / DESIGN).is_file():
                comparisons[name] = path
            else:
                runs[name] = load_run(path, device=device)
        return cls(runs, comparisons)

    def describe(self) -> dict:
        return {"runs": [served.describe(index) for index, served in enumerate(self.served)],
                "comparisons": [comparison.describe() for comparison in self.comparisons]}

    def get(self, key) -> ServedRun:
        """A run by name, or by index (an int, or digits in a query string)."""
        if isinstance(key, str) and key.isdigit():
            key = int(key)
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(self.served):
            return self.served[key]
        for served in self.served:
            if served.name == key:
                return served
        if any(comparison.name == key for comparison in self.comparisons):
            raise ApiError(422, f"{key!r} is a comparison: it has a report, not a model; "
                           f"ask one of its sub-runs' directories")
        names = ", ".join(s.name for s in self.served) or "no runs"
        raise ApiError(404, f"no run {key!r}; this server has {names}")

    def comparison(self, name: str) -> ServedComparison:
        for comparison in self.comparisons:
            if comparison.name == name:
                return comparison
        raise ApiError(404, f"no comparison {name!r}; this server has "
                       f"{', '.join(c.name for c in self.comparisons) or 'none'}")
