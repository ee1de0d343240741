"""`lmlab distill TEACHER --out DIR`: every fine-tuning option, and the student's."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmlab.commands.parsing import add_command
from lmlab.config.options import add_config_options, config_from_args
from lmlab.config.parsing import field_specs
from lmlab.distill.config import DistillConfig

# Fine-tuning settings the teacher decides (its task and reading), or that concern tasks and
# modes a student is not distilled for (QA, NER, several seeds, the bag-of-words floor).
TEACHERS_OWN = ("task", "attention", "pooling", "pretrained_checkpoint", "doc_stride",
                "max_answer_len", "n_best", "null_threshold", "label_all_pieces", "strict",
                "seeds", "baseline")


def add_distill_command(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "distill", help="teach a smaller student from a fine-tuned run",
        handler=distill_command,
        description="The teacher (a run fine-tuned for classify, pairs, regress or ner) scores "
                    "--train's texts and --unlabelled's; a student cut from it (--layers N) or "
                    "fresh (--student PRESET) learns those scores at --temperature and the "
                    "given labels; the best checkpoint on --validation is kept. The task and "
                    "how rows are read are the teacher's. With --data, a pre-trained teacher "
                    "instead: the student learns its masked-LM distribution and/or its last "
                    "layer's attention relations (--imitate) on the dataset's text.")
    parser.add_argument("teacher", type=Path, metavar="TEACHER",
                        help="a run directory written by lmlab finetune (or, with --data, a "
                             "pre-trained or imported run)")
    parser.add_argument("--config", type=Path, help="a YAML or TOML file of config fields")
    specs = field_specs(DistillConfig)
    add_config_options(parser, {name: spec for name, spec in specs.items()
                                if name not in TEACHERS_OWN})
    parser.set_defaults(**dict.fromkeys(TEACHERS_OWN))


def distill_command(args: argparse.Namespace) -> int:
    from lmlab.distill.entry import distill

    out = distill(args.teacher, config_from_args(args, DistillConfig))
    print(f"distilled run saved in {out}")
    return 0
