"""Opening a run directory: the one answer for each way a command finds its --out, given
before anything is planned, timed or written. A new run; a run replaced (--overwrite); a run
continued (--resume); a run already finished (--resume with its planned steps done and no
larger budget): it is said so and nothing trains. Everything else is refused in one line: a
run there without --resume or --overwrite, --resume with no run there, or one that asks for
another objective, model or task than the run has. `prepare_run_dir` then writes what the
opening decided, once the run's model and tokenizer are known."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer

from lmlab.atomic import make_directory
from lmlab.runs.checkpoints import (
    FINISHED,
    list_checkpoints,
    read_manifest,
    remove_unfinished,
)
from lmlab.runs.layout import (
    CHECKPOINTS,
    CONFIG,
    CURVES,
    METRICS,
    TOKENIZER,
    RunDirError,
    write_tokenizer,
)
from lmlab.runs.schema import RunConfig, RunConfigError, read_run_config, write_run_config

# What a run is, not how it trains: asking for another is asking for another run.
IDENTITY = ("objective", "model", "init", "task")


@dataclass(frozen=True)
class Opening:
    """What `out` holds for the command, decided: `kind`, the run saved there (a resume's or a
    finished run's) and the newest checkpoint, where a resume starts (None: from step 0)."""

    out: Path
    kind: Literal["new", "overwrite", "resume", "finished"]
    saved: RunConfig | None = None
    checkpoint: Path | None = None

    @property
    def resumed(self) -> bool:
        return self.kind == "resume"

    def finished_line(self, budgets: tuple[str, ...]) -> str:
        """What a resume of the finished run says in place of training."""
        step = read_manifest(self.checkpoint)["step"]
        results = [name for name in (METRICS, CURVES) if (self.out / name).exists()]
        further = (f"give --resume a larger {' or '.join('--' + name for name in budgets[:2])} "
                   "to train it further" if budgets else "use --overwrite to train it again")
        return (f"{self.out} is finished: it trained its {step} steps, so there is nothing to "
                f"resume; its results are in {self.out}"
                + (f" ({', '.join(results)})" if results else "") + f"; {further}")


def open_run_dir(out: Path, asked: dict, resume: bool, overwrite: bool,
                 budgets: tuple[str, ...], tokenizer_json: str | None = None) -> Opening:
    """How `out` opens for a command asking for the settings `asked` (its config's fields, as
    given) with --resume or --overwrite; `budgets` are the fields a resume may lengthen;
    `tokenizer_json`, the tokenizer of the data it would train on, if it brings one.
    Reads only; a refusal is a RunDirError."""
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out} exists and is not a directory")
    holds_run = (out / CONFIG).is_file()
    if out.is_dir() and any(out.iterdir()) and not holds_run:
        raise RunDirError(f"{out} holds files that are not an lmlab run; choose another --out")
    if resume and not holds_run:
        raise RunDirError(f"--resume: {out} holds no run to continue; leave out --resume to "
                          "start one there")
    if not holds_run:
        return Opening(out, "new")
    if overwrite:
        return Opening(out, "overwrite")
    if not resume:
        raise RunDirError(f"{out} holds a run already; pass --resume to continue it or "
                          "--overwrite to replace it (or choose another --out)")
    saved = read_saved(out)
    _check_same_run(out, saved.train, asked)
    _check_same_tokenizer(out, saved, tokenizer_json)  # finished or not: no two-step refusal
    checkpoints = list_checkpoints(out / CHECKPOINTS)
    newest = checkpoints[-1] if checkpoints else None
    if _finished(saved, newest, asked, budgets):
        return Opening(out, "finished", saved, newest)
    return Opening(out, "resume", saved, newest)


def _finished(saved: RunConfig, newest: Path | None, asked: dict,
              budgets: tuple[str, ...]) -> bool:
    """Whether the run ended with its `newest` checkpoint and nothing asks for more: no other
    budget now, and none given by a resume since (one cut short before its first checkpoint
    recorded it in config.json, from that checkpoint on)."""
    if newest is None or not read_manifest(newest).get(FINISHED):
        return False
    rebudgeted = any(asked.get(name) not in (None, saved.train.get(name)) for name in budgets)
    lengthened = any(resume.from_checkpoint == newest.name and set(resume.changed) & set(budgets)
                     for resume in saved.resumes)
    return not (rebudgeted or lengthened)


def read_saved(out: Path) -> RunConfig:
    try:
        return read_run_config(out / CONFIG)
    except RunConfigError as error:
        raise RunDirError(f"{out / CONFIG}: {error}; pass --overwrite to replace the run, or "
                          "choose another --out") from None


def _check_same_run(out: Path, saved: dict, asked: dict) -> None:
    """A resume continues the run that is there: another objective, model, --init source or
    task is another run, named as such."""
    differing = [name for name in IDENTITY if name in asked and asked[name] != saved.get(name)]
    if not differing:
        return

    def given(settings: dict) -> str:
        return " and ".join(f"--{name.replace('_', '-')} {settings.get(name)}"
                            for name in differing)

    raise RunDirError(f"{out} was trained with {given(saved)}; this asks for {given(asked)}, "
                      "which is another run: give it another --out, or --overwrite to replace "
                      "this one")


def prepare_run_dir(opening: Opening, config: RunConfig,
                    tokenizer_json: str | None = None) -> None:
    """Write what `opening` decided: `out` ready with `config` and the run's tokenizer (if it
    has one), an overwritten run removed first. A resumed run must have the model and
    tokenizer it was trained with."""
    out, saved = opening.out, opening.out / CONFIG
    if opening.kind == "overwrite":
        shutil.rmtree(out)
    if opening.saved is not None:
        _check_same_model(out, opening.saved.model.to_dict(), config.model.to_dict())
        _check_same_tokenizer(out, opening.saved, tokenizer_json)
    made = not out.exists()
    make_directory(out)
    try:
        if tokenizer_json:
            config = replace(config, tokenizer_sha256=write_tokenizer(out, tokenizer_json))
        write_run_config(saved, config)
    except BaseException:
        if not saved.is_file():  # a tokenizer without a config: no run, refused next time
            (out / TOKENIZER).unlink(missing_ok=True)
            if made:
                out.rmdir()
        raise
    remove_unfinished(out / CHECKPOINTS)  # a killed or failed save's, before a full disk refills


def _check_same_tokenizer(out: Path, saved: RunConfig, tokenizer_json: str | None) -> None:
    """A run continues with the tokenizer it was trained with: another one, even of the same
    size, would change what every token id means."""
    recorded = saved.tokenizer_sha256
    if not (recorded and tokenizer_json):
        return
    if hashlib.sha256(tokenizer_json.encode()).hexdigest() == recorded:
        return
    size = Tokenizer.from_str(tokenizer_json).get_vocab_size()
    sizes = (f"vocab_size {saved.model.vocab_size} → {size}; " if size != saved.model.vocab_size
             else "")
    raise RunDirError(f"{out} was trained with another tokenizer ({sizes}its SHA-256 differs "
                      "from the one recorded in config.json): the dataset was prepared with "
                      "another tokenizer; continue the run on the dataset it was trained on, "
                      "or choose another --out")


def _check_same_model(out: Path, saved: dict, wanted: dict) -> None:
    """A run resumes only into the model it saved: a different vocabulary means a dataset
    prepared with another tokenizer."""
    differing = sorted(k for k in saved.keys() | wanted.keys() if saved.get(k) != wanted.get(k))
    if not differing:
        return
    details = ", ".join(f"{k} {saved.get(k)} → {wanted.get(k)}" for k in differing[:4])
    hint = (" (the dataset was prepared with another tokenizer)"
            if "vocab_size" in differing else "")
    raise RunDirError(f"{out} was trained with another model configuration ({details}){hint}; "
                      "resume it with its own settings and dataset, or use another --out")
