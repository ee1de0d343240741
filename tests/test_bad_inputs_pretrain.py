"""Bad pre-training options are refused in one line before the run directory is written, so
the corrected command never meets a half-made run ("holds a run already")."""

import pytest

from lmlab.cli import main


@pytest.mark.parametrize("options,message", [
    (["--lr", "nan"], "lr must be a positive number, got nan"),
    (["--lr", "-1"], "lr must be a positive number, got -1.0"),
    (["--tokens", "abc"], "cannot read 'abc' as a token count"),
    (["--tokens", "0"], "tokens must be at least 1, got 0"),
    (["--warmup-steps", "-5"], "warmup_steps must be 0 or more, got -5"),
    (["--steps", "-1"], "steps must be 0 or more, got -1"),
    (["--steps", "0"], "--steps 0 trains nothing; it is for --init RUN alone"),
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


@pytest.mark.parametrize("name,content,message", [
    ("bad.yaml", "lr: [1, 2\nsteps: : :\n", "bad.yaml: not valid YAML (line 2: expected ','"),
    ("list.yaml", "- lr\n- steps\n", "list.yaml: a config file must hold a mapping of field: "
                                     "value, not a list"),
    ("binary.yaml", "\x00\x01", "binary.yaml: not valid YAML (unacceptable character"),
    ("bad.toml", "lr = [\n", "bad.toml: not valid TOML"),
    ("latin1.toml", b"lr = 0.1 # caf\xe9\n", "latin1.toml: a config file must be UTF-8 text"),
    ("config.json", "{}", "config.json: a config file must be .toml, .yaml or .yml"),
    ("missing.yaml", None, "missing.yaml: config file does not exist"),
    ("typo.yaml", "learning_rate: 0.1\n", "unknown"),
])
def test_a_bad_config_file_is_named_in_one_line(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    out = tmp_path / "run"
    assert main(["pretrain", "--config", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_a_context_longer_than_the_data_allows_writes_nothing(tmp_path, capsys):
    from lmlab.data.preparation import prepare_documents

    prepare_documents([f"document {i} about cats and dogs " * 5 for i in range(100)],
                      tmp_path / "data", vocab_size=300)
    capsys.readouterr()  # prepare's progress
    out = tmp_path / "run"
    command = ["pretrain", "--data", str(tmp_path / "data"), "--out", str(out), "--model",
               "bert-tiny", "--steps", "1"]
    assert main([*command, "--seq-len", "100000"]) == 1
    err = capsys.readouterr().err.strip()
    assert "too few for one batch" in err and len(err.splitlines()) == 1
    assert not out.exists()  # so the corrected command is not refused as "another run"
    assert main([*command, "--seq-len", "16", "--batch-size", "4"]) == 0
