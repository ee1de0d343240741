"""What `lmlab export` (Hugging Face format) does with every objective × model family ×
(pre-trained, each fine-tuning task): the class it writes and the largest difference of its
outputs from the run's, or the one-line refusal. Each cell is a tiny random run built on the
spot (tests/hf_runs.py), fine-tuned runs reading as `lmlab finetune` reads by default.

    python -m tests.export_matrix    # recompute every cell: the results file and the table

writes benchmarks/results/export_matrix.json and the table in docs/export-import.md between
its markers; tests/test_export_matrix.py holds the table to the results file and the results
to what export does now.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from lmlab.export.targets import ExportError
from lmlab.export.writer import export_run
from lmlab.finetune.base import resolve_reading
from lmlab.runs.run import load_run
from lmlab.tasks.traits import TASKS
from tests.hf_runs import finetuned_run, pretrained_run

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "export_matrix.json"
DOC = ROOT / "docs" / "export-import.md"
BEGIN, END = "<!-- export matrix: begin -->", "<!-- export matrix: end -->"
OBJECTIVES = ("mlm", "mntp", "clm", "prefix", "span", "mlm+nsp", "rtd", "mix:clm=1,mlm=1")
FAMILIES = ("bert", "gpt2", "modern", "modernbert")
STAGES = ("pre-trained", *TASKS)
LABELS = {"classify": ["neg", "pos"], "pairs": ["no", "yes"], "ner": ["O", "B-PER", "I-PER"]}


def cells() -> list[tuple[str, str, str]]:
    return [(objective, family, stage) for objective in OBJECTIVES for family in FAMILIES
            for stage in STAGES]


def build(directory: Path, objective: str, family: str, stage: str) -> Path:
    if stage == "pre-trained":
        return pretrained_run(directory, family, objective)
    from lmlab.data.tokenizer import special_tokens_of
    from lmlab.objectives.registry import build_objective
    from tests.hf_runs import sentinels_for, tiny_tokenizer

    tokenizer = tiny_tokenizer(family, sentinels_for(objective))
    built = build_objective(objective, special_tokens_of(tokenizer))
    reading = resolve_reading(built, "auto", "auto")
    return finetuned_run(directory, stage, LABELS.get(stage), reading.pooling,
                         reading.attention, family, objective=objective)


def outcome(objective: str, family: str, stage: str) -> dict:
    """{"class", "max_difference"} of the export, or {"refused": its one line}."""
    with tempfile.TemporaryDirectory() as scratch:
        run = load_run(build(Path(scratch) / "run", objective, family, stage))
        try:
            exported = export_run(run, Path(scratch) / "hf")
        except ExportError as refusal:
            return {"refused": str(refusal)}
        return {"class": exported.target.architecture,
                "max_difference": exported.max_difference}


def table(results: dict) -> str:
    """Markdown: a row per objective and family, a column per stage; refusals numbered by
    their reason, the reasons listed under the table."""
    reasons: list[str] = []
    lines = ["| objective | family | " + " | ".join(STAGES) + " |",
             "| --- | --- |" + " --- |" * len(STAGES)]
    for objective in OBJECTIVES:
        for family in FAMILIES:
            row = []
            for stage in STAGES:
                found = results[f"{objective} / {family} / {stage}"]
                if "refused" in found:
                    if found["refused"] not in reasons:
                        reasons.append(found["refused"])
                    row.append(f"refused ({reasons.index(found['refused']) + 1})")
                else:
                    row.append(f"{found['class']} ({found['max_difference']:.0e})")
            lines.append(f"| {objective} | {family} | " + " | ".join(row) + " |")
    lines.append("")
    lines += [f"{index}. {reason}" for index, reason in enumerate(reasons, 1)]
    return "\n".join(lines)


def doc_table(text: str) -> str:
    return text.split(BEGIN)[1].split(END)[0].strip()


def with_table(text: str, rendered: str) -> str:
    """`text` with `rendered` between the markers, in place of what was there."""
    before, rest = text.split(BEGIN)
    return f"{before}{BEGIN}\n{rendered}\n{END}{rest.split(END)[1]}"


def main() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from record import machine, write_results

    results = {" / ".join(cell): outcome(*cell) for cell in cells()}
    write_results(RESULTS, {"machine": machine(), "results": results}, ROOT)
    DOC.write_text(with_table(DOC.read_text(), table(results)))


if __name__ == "__main__":
    main()
