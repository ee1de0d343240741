"""The command line starts at once: building the parser, `--help` and argument errors import
none of torch, numpy or tokenizers, which handlers import when they run."""

import subprocess
import sys

HEAVY = ("torch", "numpy", "tokenizers")


def loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_importing_the_command_line_imports_no_heavy_library():
    assert loaded_after("import lmlab.cli; lmlab.cli.build_parser()") == []


def test_help_and_argument_errors_import_no_heavy_library():
    code = ("import contextlib, io\nfrom lmlab.cli import main\n"
            "for argv in (['--help'], ['pretrain', '--help'], ['generate', 'run', '--topk', '3'],"
            " ['prepare']):\n"
            "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()),"
            " contextlib.redirect_stderr(io.StringIO()):\n"
            "        main(argv)")
    assert loaded_after(code) == []
