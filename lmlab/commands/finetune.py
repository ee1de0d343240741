"""`lmlab finetune` (every fine-tuning config field is an option) and `lmlab predict`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lmlab.commands.parsing import add_command, add_run_arguments, check_input_file, read_texts
from lmlab.config.options import add_config_options, config_from_args, options_given
from lmlab.config.parsing import field_specs
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.traits import TASKS


def add_finetune_commands(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "finetune", help="fine-tune a run on a labelled task",
        handler=finetune_command,
        description=f"Fine-tune a pre-trained run (any objective) on {', '.join(TASKS)} "
                    "data; the best checkpoint by the task's main metric is kept and scored on "
                    "--test. Options override a --config file.")
    parser.add_argument("run_dir", type=Path, metavar="RUN",
                        help="a run directory written by lmlab pretrain or lmlab import")
    parser.add_argument("--config", type=Path, help="a YAML or TOML file of config fields")
    parser.add_argument("--suite", action="append", metavar="NAME=TASK:TRAIN:VALIDATION[:TEST]",
                        help="fine-tune on a suite of tasks instead of --task: repeat for each "
                             "task, give NAME=CONFIG.yaml (an lmlab finetune config file) for "
                             "one whose columns or splits need naming, or a suite file (YAML "
                             "or TOML: NAME: TASK:... or NAME: CONFIG.yaml); every task trains "
                             "with the other options, --seeds 5 unless given, its bag-of-words "
                             "floor fitted unless --baseline none; writes OUT/NAME per task "
                             "and the median over seeds per task and their average in "
                             "OUT/suite.json and OUT/suite.md")
    add_config_options(parser, field_specs(FinetuneConfig))

    parser = add_command(
        commands, "predict", help="predict with a fine-tuned run", handler=predict_command,
        description="Labels, numbers, answers or entities for texts given as arguments, in "
                    "--file or on stdin, one per line, or for the examples of a --file in the "
                    "task's format. A pair of texts, or a question and its context, is written "
                    "'A ||| B'.")
    add_run_arguments(parser, "fine-tuned")
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to predict for")
    parser.add_argument("--file", type=Path,
                        help="a file in the task's format (a table: .tsv, .csv, .jsonl or "
                             "tab-separated; SQuAD JSON; CoNLL columns) or of plain text, one "
                             "text per line")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per input, with the input (and its gold label "
                             "or answers, where the file has them)")
    parser.add_argument("--all-scores", action="store_true",
                        help="every label's score, not only the best label's")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per forward pass")


def finetune_command(args: argparse.Namespace) -> int:
    if args.suite:
        return suite_command(args)
    from lmlab.finetune.entry import finetune

    out = finetune(args.run_dir, config_from_args(args, FinetuneConfig))
    print(f"fine-tuned run saved in {out}")
    return 0


def suite_command(args: argparse.Namespace) -> int:
    from lmlab.config.parsing import read_config_file
    from lmlab.finetune.suite import DEFAULT_OUT, read_suite, run_suite

    tasks = read_suite(args.suite)
    shared = read_config_file(args.config, FinetuneConfig) if args.config else {}
    shared.update(options_given(args, FinetuneConfig))
    run_suite(args.run_dir, tasks, shared)
    print(f"suite results saved in {shared.get('out') or DEFAULT_OUT}")
    return 0


def predict_command(args: argparse.Namespace) -> int:
    from lmlab.infer.predict import fine_tuned_task, predict
    from lmlab.runs.run import load_run
    from lmlab.tasks.formats import example_files

    if args.file is not None:
        check_input_file(args.file)
    run = load_run(args.run_dir, args.checkpoint, args.device)
    task_file = (args.file is not None and not args.texts
                 and example_files(fine_tuned_task(run)[1]).holds(args.file))
    texts = None if task_file else read_texts(args.texts, args.file)
    found = predict(run, texts, args.file if task_file else None, args.all_scores,
                    args.batch_size, with_inputs=args.json)
    for item in found:
        print(json.dumps(item) if args.json else one_line(item))
    return 0


def one_line(item: dict) -> str:
    """A prediction for reading in a terminal."""
    if "entities" in item:
        return "; ".join(f"{e['entity_group']} {e['word']!r} [{e['start']}:{e['end']}] "
                         f"{e['score']:.3f}" for e in item["entities"]) or "(no entities)"
    if "answer" in item:
        return f"{item['answer']!r}\t{item['score']:.4f}\t[{item['start']}:{item['end']}]"
    if "label" in item:
        scores = item.get("scores")
        rest = "\t" + " ".join(f"{k}={v:.4f}" for k, v in scores.items()) if scores else ""
        return f"{item['label']}\t{item['score']:.4f}{rest}"
    return f"{item['score']:.4f}"
