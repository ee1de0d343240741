"""`lmlab eval RUN --data DIR|FILES... --pairs FILES...` and `lmlab eval RUN --harness TASKS`:
the command line of evaluation."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmlab.commands.parsing import add_command, add_run_arguments, check_output_file
from lmlab.eval.windows import DEFAULT_BATCH_TOKENS


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
    parser.add_argument("--out", type=Path, help="also write the results here as JSON "
                                                 "(with --harness: lm-eval's results)")


def eval_command(args: argparse.Namespace) -> int:
    from lmlab.eval.evaluate import evaluate
    from lmlab.eval.report import format_report, write_json

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
    if args.data is not None or args.pairs is not None:
        raise ValueError("--harness runs lm-eval's tasks alone; evaluate --data and --pairs "
                         "in another lmlab eval")
    if args.harness_include is not None and not args.harness_include.is_dir():
        raise ValueError(f"--harness-include {args.harness_include}: no such folder")
    tasks = [task.strip() for task in args.harness.split(",") if task.strip()]
    if not tasks:
        raise ValueError("--harness needs at least one task name, such as --harness hellaswag")
    if args.out:
        check_output_file(args.out, "results.json")
    require_extra("lm_eval", "harness", "--harness", package="lm-eval")
    from lmlab.atomic import make_directory, write_text_atomic
    from lmlab.harness.lm_harness import evaluate_tasks, results_json, results_table
    from lmlab.runs import load_run

    run = load_run(args.run_dir, args.checkpoint, args.device)
    results = evaluate_tasks(run, tasks, args.harness_include, args.batch_tokens)
    print(results_table(results))
    if args.out:
        make_directory(args.out.parent)
        write_text_atomic(args.out, results_json(results))
        print(f"results written to {args.out}")
    return 0
