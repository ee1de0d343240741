"""`lmlab eval RUN --data DIR|FILES... --pairs FILES...`, `lmlab eval RUN --harness TASKS` and
`lmlab eval RUN --mteb TASKS`: the command line of evaluation."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmlab.commands.parsing import add_command, add_run_arguments, check_output_file
from lmlab.eval.windows import DEFAULT_BATCH_TOKENS
from lmlab.infer.choices import POOLINGS


def add_eval_command(commands) -> None:
    parser = add_command(
        commands, "eval", help="perplexity, bits per byte and minimal-pair accuracy of a run",
        handler=eval_command)
    add_run_arguments(parser, "pre-trained")
    parser.add_argument("--data", nargs="+", metavar="SOURCE",
                        help="a prepared dataset directory, or .txt/.jsonl files")
    parser.add_argument("--split", default="validation", help="a dataset's split to score")
    parser.add_argument("--pairs", nargs="+", metavar="FILE",
                        help="BLiMP-format .jsonl files (sentence_good, sentence_bad) or "
                             "directories of them")
    parser.add_argument("--group-by", metavar="KEYS",
                        help="comma-separated minimal-pair fields to group accuracy by "
                             "('file' = the file name); default: file, field and UID where "
                             "present")
    parser.add_argument("--stride", type=int,
                        help="tokens a window moves by on long documents; default: half the "
                             "model's context")
    parser.add_argument("--max-tokens", type=int, help="score only the text's first this many "
                                                       "tokens (the last document read is cut)")
    parser.add_argument("--text-field", default="text", help="JSONL field to read")
    parser.add_argument("--batch-tokens", type=int, default=DEFAULT_BATCH_TOKENS,
                        help="padded tokens per forward pass")
    parser.add_argument("--harness", metavar="TASKS",
                        help="comma-separated lm-evaluation-harness tasks to run on a run that "
                             "predicts the next token (pip install 'lmlab[harness]')")
    parser.add_argument("--harness-include", type=Path, metavar="DIR",
                        help="a folder of lm-eval task YAMLs of your own, for --harness")
    parser.add_argument("--mteb", metavar="TASKS",
                        help="comma-separated MTEB tasks to score the run's embeddings on "
                             "(pip install 'lmlab[mteb]')")
    parser.add_argument("--pooling", choices=POOLINGS,
                        help="with --mteb: the embeddings' pooling, as lmlab embed's; default: "
                             "the run's own, else mean")
    parser.add_argument("--out", type=Path, help="also write the results here as JSON "
                                                 "(with --harness: lm-eval's results; with "
                                                 "--mteb: MTEB's, one entry a task)")


def eval_command(args: argparse.Namespace) -> int:
    from lmlab.eval.evaluate import evaluate
    from lmlab.eval.report import format_report, write_json

    if args.mteb is not None:
        return mteb_command(args)
    if args.pooling is not None:
        raise ValueError("--pooling chooses the embeddings --mteb scores; give --mteb TASKS")
    if args.harness is not None or args.harness_include is not None:
        return harness_command(args)
    if args.data is None and args.pairs is None:
        raise ValueError("lmlab eval needs --data (a prepared dataset or text files) and/or "
                         "--pairs (minimal-pair files), or --harness TASKS")
    if args.out:
        check_output_file(args.out, "results.json")
    group_by = [key.strip() for key in args.group_by.split(",")] if args.group_by else None
    result = evaluate(args.run_dir, args.data, args.pairs, stride=args.stride,
                      split=args.split, max_tokens=args.max_tokens, text_field=args.text_field,
                      group_by=group_by, checkpoint=args.checkpoint, device=args.device,
                      batch_tokens=args.batch_tokens, progress=True)
    print(format_report(result))
    if args.out:
        write_json(result, args.out)
        print(f"results written to {args.out}")
    return 0


def harness_command(args: argparse.Namespace) -> int:
    from lmlab.extras import require_extra

    if args.harness is None:
        raise ValueError("--harness-include names task YAMLs for --harness; give --harness "
                         "TASKS too")
    tasks = _suite_tasks(args, "--harness", "hellaswag")
    if args.harness_include is not None and not args.harness_include.is_dir():
        raise ValueError(f"--harness-include {args.harness_include}: no such folder")
    require_extra("lm_eval", "harness", "--harness", package="lm-eval")
    from lmlab.harness.lm_harness import evaluate_tasks, results_json, results_table
    from lmlab.runs import load_run

    run = load_run(args.run_dir, args.checkpoint, args.device)
    results = evaluate_tasks(run, tasks, args.harness_include, args.batch_tokens)
    return _report(results_table(results), results_json(results), args.out)


def mteb_command(args: argparse.Namespace) -> int:
    from lmlab.extras import require_extra

    if args.harness is not None or args.harness_include is not None:
        raise ValueError("--mteb and --harness each run alone; give them to separate "
                         "lmlab evals")
    tasks = _suite_tasks(args, "--mteb", "STSBenchmark")
    require_extra("mteb", "mteb", "--mteb")
    from lmlab.harness.mteb_encoder import evaluate_mteb, results_json, results_table
    from lmlab.runs import load_run

    run = load_run(args.run_dir, args.checkpoint, args.device)
    result = evaluate_mteb(run, tasks, args.pooling)
    return _report(results_table(result), results_json(result), args.out)


def _suite_tasks(args: argparse.Namespace, option: str, example: str) -> list[str]:
    """The task names `option` gives, checked with what else the command was given."""
    if args.data is not None or args.pairs is not None:
        raise ValueError(f"{option} runs its tasks alone; evaluate --data and --pairs in "
                         "another lmlab eval")
    tasks = [task.strip() for task in getattr(args, option[2:]).split(",") if task.strip()]
    if not tasks:
        raise ValueError(f"{option} needs at least one task name, such as {option} {example}")
    if args.out:
        check_output_file(args.out, "results.json")
    return tasks


def _report(table: str, text: str, out: Path | None) -> int:
    """Print a suite's table; with --out, write its results file too."""
    from lmlab.atomic import make_directory, write_text_atomic

    print(table)
    if out:
        make_directory(out.parent)
        write_text_atomic(out, text)
        print(f"results written to {out}")
    return 0
