"""Bad pre-training options are refused in one line before the run directory is written, so
the corrected command never meets a half-made run ("holds another run")."""

import pytest

from lmlab.cli import main


@pytest.mark.parametrize("options,message", [
    (["--lr", "nan"], "lr must be a positive number, got nan"),
    (["--lr", "-1"], "lr must be a positive number, got -1.0"),
    (["--tokens", "abc"], "cannot read 'abc' as a token count"),
    (["--tokens", "0"], "tokens must be at least 1, got 0"),
    (["--warmup-steps", "-5"], "warmup_steps must be 0 or more, got -5"),
    (["--steps", "0"], "steps must be at least 1, got 0"),
    (["--minutes", "-1"], "minutes must be a positive number, got -1.0"),
    (["--minutes", "nan"], "minutes must be a positive number, got nan"),
    (["--objective", "clm", "--seq-len", "1"], "seq_len must be at least 2"),
])
def test_a_bad_option_writes_nothing(tmp_path, capsys, options, message):
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(tmp_path / "never-read"), "--out", str(out),
                 *options]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
