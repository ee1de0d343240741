"""How every `lmlab` subcommand is built: one parser class, shared options, and "did you mean"
for unknown options (options generated from configuration dataclasses: lmlab.config.options)."""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from pathlib import Path


class HelpFormatter(argparse.HelpFormatter):
    """Help that names each option's default, when it has one worth naming."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if "%(default)" in help_text or action.default in (None, False, argparse.SUPPRESS):
            return help_text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{help_text} (default: %(default)s)"
        return help_text


class CommandParser(argparse.ArgumentParser):
    """Accepts positional texts after options (`RUN --top-k 3 "text"`), which plain argparse
    refuses once a positional argument takes a variable number of values."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixing:  # parse_known_intermixed_args calls back into this method
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def add_command(commands: argparse._SubParsersAction, name: str, help: str,
                handler, description: str | None = None) -> CommandParser:
    """A subcommand whose parsed arguments go to `handler(args) -> exit code` (a
    CommandParser: `commands` is made with `parser_class=CommandParser`). Options are spelt
    out in full: an abbreviation would silently change meaning as options are added."""
    parser = commands.add_parser(name, help=help, description=description or help,
                                 formatter_class=HelpFormatter, allow_abbrev=False)
    parser.set_defaults(handler=handler)
    return parser


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto",
                        help="auto (a GPU when there is one), cpu, cuda or cuda:N")


# The runs a command reads → RUN's help, and what its `best` checkpoint is best at.
RUN_KINDS = {
    "pre-trained": ("a run directory written by lmlab pretrain or lmlab import",
                    "lowest validation loss"),
    "fine-tuned": ("a run directory written by lmlab finetune",
                   "highest validation score on the task's main metric: accuracy, Pearson's r "
                   "or F1"),
    "any": ("a run directory written by lmlab pretrain, finetune or import",
            "a pre-trained run's lowest validation loss, a fine-tuned run's highest validation "
            "score on its task's main metric"),
}


def add_run_arguments(parser: argparse.ArgumentParser, runs: str = "any") -> None:
    """RUN, which of its checkpoints, and the device: what every command reading a run takes.
    `runs` (a key of RUN_KINDS) says which runs the command reads."""
    run_help, best = RUN_KINDS[runs]
    parser.add_argument("run_dir", type=Path, metavar="RUN", help=run_help)
    parser.add_argument("--checkpoint", default="best",
                        help=f"best ({best}), last, or a checkpoint's name")
    add_device_argument(parser)


def unknown_option_message(parser: argparse.ArgumentParser, option: str) -> str:
    """`unknown option --lr-rate; did you mean --lr?` for one of `parser`'s options."""
    known = [s for action in parser._actions for s in action.option_strings]
    close = difflib.get_close_matches(option, known, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown option {option}{hint}"


def check_input_file(path: Path, option: str = "--file") -> None:
    """Refuse, before any work, an input file that is not there or is a directory."""
    if path.is_dir():
        raise ValueError(f"{path} is a directory; {option} takes a file")
    if not path.is_file():
        raise ValueError(f"{path}: no such file")


def read_texts(texts: list[str], file: Path | None) -> list[str]:
    """The texts given as arguments, else the lines of `file`, else those of stdin; blank
    lines are skipped. Read before a model is loaded, so that a bad file is reported at once."""
    if texts and file is not None:
        raise ValueError("give texts as arguments or with --file, not both")
    if texts:
        return list(texts)
    if file is not None:
        lines = _file_lines(file)
    elif sys.stdin.isatty():
        raise ValueError("no texts: give them as arguments, with --file or on stdin")
    else:
        lines = sys.stdin.read().splitlines()
    found = [line for line in lines if line.strip()]
    if not found:
        raise ValueError(f"{file or 'stdin'} holds no text")
    return found


def _file_lines(path: Path) -> list[str]:
    check_input_file(path)
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text (invalid byte at offset {error.start}); "
                         "--file takes a text file, one text per line") from None


def check_output_file(path: Path, example: str) -> None:
    """Refuse an output file that could not be written, before any work is spent on it. Its
    missing folders are made when it is written."""
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a file name, such as {path / example}")
    folder = next(parent for parent in path.parents if parent.exists())
    if not folder.is_dir():
        raise ValueError(f"{folder} is a file, so {path} cannot be written")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ValueError(f"{path} cannot be written: {error.strerror} in {folder}") from None
