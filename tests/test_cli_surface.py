"""The command line's surface, frozen: every subcommand's options, presets and objectives. A
change here is a deliberate change of the interface; update the snapshot with it."""

import argparse
import subprocess
import sys

import pytest

from lmlab.cli import build_parser, main
from lmlab.config.presets import preset_names
from lmlab.objectives.registry import objective_names

SURFACE = {
    "compare": ["--batch-size", "--budget", "--cluster", "--cpus-per-run", "--data",
                "--eval-tokens", "--fractions", "--gpus-per-run", "--help", "--init", "--lr",
                "--mask-prob",
                "--match", "--mlm-rate", "--mlm-rate-schedule", "--mlm-rate-start",
                "--mlm-selection", "--model",
                "--objectives", "--optimizer", "--out", "--pairs", "--precision", "--prefix-len",
                "--probe", "--probe-epochs", "--probe-lr", "--probe-seeds", "--random-prob",
                "--report-to", "--rtd-disallow-correct", "--rtd-generator", "--rtd-sharing",
                "--rtd-temperature", "--rtd-weight", "--seeds",
                "--seq-len", "--span-mean-length", "--span-noise-density", "--whole-word",
                "--workers"],
    "distill": ["--activation-checkpointing", "--batch-size", "--beta2", "--checkpoint-every",
                "--class-weights", "--compile", "--config", "--data", "--distributed", "--dropout",
                "--embedding-lr-scale", "--epochs", "--eval-every", "--grad-clip",
                "--hard-weight", "--help", "--imitate", "--keep-last", "--label-column",
                "--layers", "--log-every", "--lr", "--lr-floor",
                "--max-len", "--max-nonfinite-steps", "--micro-batch-size", "--minutes",
                "--mixed-lengths", "--muon-momentum-warmup-steps", "--optimizer", "--out",
                "--overwrite", "--pair-column",
                "--patience",
                "--precision", "--report-to", "--resume", "--schedule", "--seed", "--seq-len",
                "--steps",
                "--student", "--temperature", "--test", "--test-where", "--text-column",
                "--train", "--train-where", "--unlabelled", "--validation", "--validation-where",
                "--warmup-steps", "--weight-decay", "--width"],
    "embed": ["--batch-size", "--checkpoint", "--device", "--file", "--help", "--ids",
              "--no-normalize", "--normalize", "--out", "--pooling", "--threads"],
    "eval": ["--batch-tokens", "--checkpoint", "--data", "--device", "--group-by",
             "--harness", "--harness-include", "--help", "--max-tokens", "--mteb", "--out",
             "--pairs", "--pooling", "--split", "--stride", "--text-field"],
    "export": ["--checkpoint", "--device", "--dtype", "--format", "--help", "--no-check",
               "--no-normalize", "--normalize", "--out", "--pooling"],
    "fill-mask": ["--batch-size", "--checkpoint", "--device", "--file", "--help", "--ids",
                  "--json", "--threads", "--top-k"],
    "finetune": ["--activation-checkpointing", "--attention", "--baseline", "--batch-size",
                 "--beta2",
                 "--checkpoint-every", "--class-weights", "--compile", "--config",
                 "--distributed", "--doc-stride",
                 "--dropout", "--embedding-lr-scale", "--epochs",
                 "--eval-every", "--grad-clip", "--help", "--keep-last", "--label-all-pieces",
                 "--label-column", "--log-every", "--lr", "--lr-floor", "--max-answer-len",
                 "--max-len", "--max-nonfinite-steps", "--micro-batch-size", "--minutes",
                 "--mixed-lengths", "--muon-momentum-warmup-steps", "--n-best",
                 "--null-threshold", "--optimizer", "--out", "--overwrite", "--pair-column",
                 "--patience",
                 "--pooling", "--precision", "--pretrained-checkpoint", "--report-to",
                 "--resume", "--schedule", "--seed", "--seeds", "--steps", "--strict", "--suite",
                 "--task", "--test", "--test-where",
                 "--text-column", "--train", "--train-where", "--validation",
                 "--validation-where", "--warmup-steps", "--weight-decay"],
    "generate": ["--checkpoint", "--device", "--greedy", "--help", "--ids", "--json",
                 "--max-new-tokens", "--num-samples", "--repetition-penalty", "--seed", "--stop",
                 "--temperature", "--threads", "--top-k", "--top-p", "--truncate-left"],
    "import": ["--allow-pickle", "--help", "--out"],
    "plan": ["--batch-size", "--data", "--eval-tokens", "--family", "--flops", "--fractions",
             "--help", "--init", "--minutes", "--model", "--objective", "--objectives", "--out",
             "--precision", "--probe", "--probe-epochs", "--probe-seeds", "--seeds",
             "--seq-len", "--sizes", "--steps-to-time", "--tokens"],
    "predict": ["--all-scores", "--batch-size", "--checkpoint", "--device", "--file", "--help",
                "--json"],
    "prepare": ["--blank-line-documents", "--engine", "--executor", "--help",
                "--keep-control-characters", "--near-dedup-threshold", "--no-exact-dedup",
                "--no-near-dedup", "--normalisation", "--out", "--quality-filter", "--recipe",
                "--seed", "--sentence-split", "--sentinels", "--strict", "--tasks",
                "--text-field", "--tokenizer", "--validation-fraction", "--verbose",
                "--vocab-size", "--workers"],
    "pretrain": ["--activation-checkpointing", "--batch-size", "--batch-size-warmup-steps",
                 "--beta2", "--checkpoint-every",
                 "--compile", "--config", "--data", "--distributed", "--embedding-lr-scale",
                 "--eval-batches",
                 "--eval-every", "--grad-clip",
                 "--head-warmup-steps", "--help", "--init", "--keep-last", "--log-every",
                 "--lr", "--lr-floor",
                 "--mask-prob",
                 "--max-nonfinite-steps", "--micro-batch-size", "--minutes", "--mlm-rate",
                 "--mlm-rate-schedule", "--mlm-rate-start", "--mlm-selection", "--model",
                 "--model-overrides",
                 "--muon-momentum-warmup-steps", "--num-workers", "--objective", "--optimizer",
                 "--out", "--overwrite", "--packing",
                 "--patience",
                 "--precision", "--prefix-len", "--random-prob", "--report-to", "--resume",
                 "--rtd-disallow-correct", "--rtd-generator", "--rtd-recipe", "--rtd-sharing",
                 "--rtd-temperature", "--rtd-weight", "--schedule",
                 "--seed", "--seq-len", "--seq-len-warmup-steps", "--span-mean-length",
                 "--span-noise-density", "--steps",
                 "--tokens", "--untie-at", "--warmup-steps", "--weight-decay", "--whole-word"],
    "serve": ["--device", "--help", "--host", "--max-generations", "--port"],
}
PRESETS = [f"{family}-{size}" for family in ("bert", "gpt2", "modern", "modernbert")
           for size in ("tiny", "mini", "small", "medium", "base")]
OBJECTIVES = ["mlm", "mntp", "clm", "prefix", "span", "mlm+nsp", "rtd", "mix:A=w,B=w",
              "alternate:A,B@steps", "then:A,B@fraction"]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    return build_parser()._subparsers._group_actions[0].choices


def test_the_surface_is_what_the_snapshot_says():
    surface = {name: sorted(option for action in parser._actions
                            for option in action.option_strings if option.startswith("--"))
               for name, parser in subcommands().items()}
    assert surface == SURFACE
    assert preset_names() == PRESETS
    assert objective_names() == OBJECTIVES


@pytest.mark.parametrize("name", sorted(SURFACE))
def test_every_option_and_argument_says_what_it_does(name):
    for action in subcommands()[name]._actions:
        assert action.help, f"{name}: {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize("args", [[], *([name] for name in SURFACE)])
def test_help_works_for_the_command_and_every_subcommand(args, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith("usage: lmlab")
    for option in SURFACE.get(args[0], []) if args else SURFACE:
        assert option in shown


def test_help_shows_defaults_and_choices(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "peak learning rate; none = 0.001 from random weights, 0.0001 when continuing" in shown
    assert "--precision {auto,fp32,bf16,fp16}" in shown
    assert "share of ordinary tokens a masked objective selects (default: 0.15)" in shown


@pytest.mark.parametrize("args,suggestion", [
    (["pretrain", "--stpes", "3"], "unknown option --stpes; did you mean --steps?"),
    (["eval", "run", "--strid", "3"], "unknown option --strid; did you mean --stride?"),
    (["generate", "run", "--temprature", "0.5"], "did you mean --temperature?"),
    (["fill-mask", "run", "--topk", "3"], "did you mean --top-k?"),
    (["embed", "run", "--out", "v.npy", "--normalise"], "did you mean --normalize?"),
    (["prepare", "--out", "d", "--vocab", "9"], "did you mean --vocab-size?"),
])
def test_an_unknown_option_is_named_with_the_closest_one(args, suggestion, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert suggestion in capsys.readouterr().err


def test_device_means_the_same_everywhere():
    for name in ("eval", "fill-mask", "generate", "embed"):
        device = next(a for a in subcommands()[name]._actions if "--device" in a.option_strings)
        assert device.default == "auto" and "auto" in device.help


def test_importing_lmlab_leaves_the_training_engine_unloaded():
    code = ("import sys, lmlab; print([m for m in sys.modules if m.startswith('lmlab.train') "
            "or m == 'torch.distributed.fsdp._fully_shard._fully_shard'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_pipeline_verbs_are_top_level():
    import lmlab

    for verb in ("prepare", "pretrain", "load", "evaluate"):
        assert callable(getattr(lmlab, verb)) and verb in lmlab.__all__
