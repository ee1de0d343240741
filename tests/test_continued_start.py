"""A continued run measures where it started and guards what it started from: validation at
step 0 (the weights as they came), a head warm-up that trains only the heads the source lacks
while the rest stays exactly as it was, a closing summary from start to end that says "worse"
when the run made its own text worse, and refusals of a head warm-up that cannot be done."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from lmlab.commands.pretrain_summary import summary
from lmlab.config.training import CONTINUED_LR, TrainConfig
from lmlab.runs.metrics import read_metrics
from lmlab.runs.run import load_run
from lmlab.train import entry as pretraining
from lmlab.train.head_warmup import HeadWarmup
from lmlab.train.schedule import Schedule
from lmlab.train.warm_start import InitError
from tests.test_continued_pretraining import TINY, source, toy  # noqa: F401 (fixtures)


def evals(run) -> list[dict]:
    return [r for r in read_metrics(run) if r["kind"] == "eval"]


def test_step_0_is_validated_before_any_update(source, toy, tmp_path):  # noqa: F811
    out = pretraining.pretrain(TrainConfig(objective="clm", init=str(source),
                                           out=str(tmp_path / "c"), **TINY), toy)
    records = read_metrics(out)
    assert records[0]["kind"] == "eval" and records[0]["step"] == 0
    assert records[0]["head_warmup_steps"] == 0  # the source has the lm head clm trains
    # the weights as they came: the source's own validation of the checkpoint continued from
    best = load_run(source).checkpoint.name
    (theirs,) = [r for r in evals(source) if f"step-{r['step']:08d}" == best]
    assert records[0]["clm/clm_loss"] == pytest.approx(theirs["clm/clm_loss"], rel=1e-6)


def test_a_new_head_trains_alone_first_and_the_rest_stays_as_it_came(source, toy,  # noqa: F811
                                                                       tmp_path):
    out = pretraining.pretrain(TrainConfig(
        objective="mlm", init=str(source), out=str(tmp_path / "c"), checkpoint_every=1,
        keep_last=5, head_warmup_steps=2, **{**TINY, "steps": 3}), toy)
    came = load_file(load_run(source).checkpoint / "model.safetensors")

    def weights(step: int) -> dict:
        return load_file(out / "checkpoints" / f"step-{step:08d}" / "model.safetensors")

    for step in (1, 2):  # the warm-up: the backbone exactly as it came, the new head learning
        assert all(torch.equal(value, came[name]) for name, value in weights(step).items()
                   if name.startswith("backbone."))
    head = [name for name in weights(2) if name.startswith("heads.mlm.transform")]
    assert head and not all(torch.equal(weights(1)[n], weights(2)[n]) for n in head)
    assert any(not torch.equal(value, came[name]) for name, value in weights(3).items()
               if name.startswith("backbone."))  # then everything trains
    assert [r["step"] for r in evals(out)][:2] == [0, 2]  # the start the body is judged from


def test_head_warmup_freezes_all_but_the_new_head_and_releases_at_its_end(source):  # noqa: F811
    from lmlab.train.warm_start import load_source, warm_started_model

    model = warm_started_model(load_source(str(source)), ("lm", "mlm"))
    warmup = HeadWarmup.of(model, ("mlm",), steps=2)
    tied = model.backbone.token_embedding.weight
    frozen = {id(p) for p in warmup.frozen}
    assert id(tied) in frozen  # a decoder tied to the embeddings belongs to the body
    assert all(id(p) in frozen for p in model.heads["lm"].parameters())  # the source's head
    learning = [p for p in model.parameters() if id(p) not in frozen]
    assert learning and all(any(p is q for q in model.heads["mlm"].parameters())
                            for p in learning)
    warmup.at(0)
    assert not tied.requires_grad and all(p.requires_grad for p in learning)
    warmup.at(2)
    assert all(p.requires_grad for p in model.parameters())


def test_the_schedule_holds_for_the_head_warmup_then_warms_up_the_body():
    schedule = Schedule("constant", total_steps=10, warmup_steps=2, held_steps=3,
                        held_level=10.0)
    assert [schedule(s) for s in range(6)] == [10.0, 10.0, 10.0, 0.5, 1.0, 1.0]


def test_the_summary_says_worse_when_the_run_made_its_text_worse(source, toy,  # noqa: F811
                                                                  tmp_path):
    config = TrainConfig(objective="clm", init=str(source), out=str(tmp_path / "c"),
                         optimizer="adamw", lr=3.0, **{**TINY, "steps": 4})
    out = pretraining.pretrain(config, toy)
    start, end = evals(out)[0], evals(out)[-1]
    assert end["clm/clm_loss"] > start["clm/clm_loss"]
    text = summary(out, toy, config)
    assert (f"validation loss (next token): {start['clm/clm_loss']:.2f} → "
            f"{end['clm/clm_loss']:.2f} nats") in text
    assert "warning: the model ended worse on its own text than it began" in text


def test_a_run_that_improved_has_no_worse_line(source, toy, tmp_path):  # noqa: F811
    config = TrainConfig(objective="clm", init=str(source), out=str(tmp_path / "c"),
                         lr=1e-3, **{**TINY, "steps": 6})
    out = pretraining.pretrain(config, toy)
    assert evals(out)[-1]["clm/clm_loss"] < evals(out)[0]["clm/clm_loss"]
    text = summary(out, toy, config)
    assert "from its start (the weights as they came, step 0) to its end (step 6)" in text
    assert "worse" not in text


def test_a_budget_within_the_head_warmup_says_so_before_training(source, toy, tmp_path,  # noqa: F811
                                                                capsys):
    pretraining.pretrain(TrainConfig(objective="mlm", init=str(source), out=str(tmp_path / "c"),
                                     head_warmup_steps=2, **TINY), toy)
    printed = capsys.readouterr().out
    warning = printed.index("warning: the budget (2 steps) ends within the head warm-up "
                            "(2 steps), so the body never trains")
    assert warning < printed.index("training: step 1 of 2 starts")


def test_a_head_warmup_with_nothing_to_warm_up_is_refused(source, toy, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="--head-warmup-steps trains the heads an --init run "
                                         "lacks; give --init RUN"):
        TrainConfig(objective="clm", head_warmup_steps=3)
    with pytest.raises(InitError, match="already has every head clm trains"):
        pretraining.pretrain(TrainConfig(objective="clm", init=str(source), head_warmup_steps=1,
                                         out=str(tmp_path / "never"), **TINY), toy)
    assert not (tmp_path / "never").exists()


def test_continued_weights_learn_at_a_tenth_of_the_rate_by_default(source, toy,  # noqa: F811
                                                                  tmp_path):
    out = pretraining.pretrain(TrainConfig(objective="clm", init=str(source),
                                           out=str(tmp_path / "c"), **TINY), toy)
    assert load_run(out).config.train["lr"] == CONTINUED_LR == 1e-4
    assert load_run(source).config.train["lr"] == 1e-3  # from random weights
    given = pretraining.pretrain(TrainConfig(objective="clm", init=str(source), lr=3e-4,
                                             out=str(tmp_path / "g"), **TINY), toy)
    assert load_run(given).config.train["lr"] == 3e-4


def test_no_steps_with_a_new_head_keep_the_source_as_it_came(source, toy, tmp_path,  # noqa: F811
                                                             capsys):
    """A control of lmlab compare --init: no steps, so no head warm-up to plan or warn of."""
    settings = {k: v for k, v in TINY.items() if k not in ("steps", "warmup_steps")}
    out = pretraining.pretrain(TrainConfig(objective="mlm", init=str(source), steps=0,
                                           out=str(tmp_path / "c"), **settings), toy)
    assert "warm-up" not in capsys.readouterr().out
    (record,) = evals(out)
    assert record["step"] == 0 and record["head_warmup_steps"] == 0


def test_a_head_warmup_longer_than_the_run_still_runs(source, toy, tmp_path):  # noqa: F811
    """... and its summary says that only the new heads trained (as when a time budget
    re-plans a run shorter than its warm-up)."""
    from lmlab.commands.pretrain_summary import _before_after_lines

    out = pretraining.pretrain(TrainConfig(objective="mlm", init=str(source), head_warmup_steps=5,
                                           out=str(tmp_path / "c"), **TINY), toy)
    assert [r["step"] for r in evals(out)] == [0, 2]
    assert _before_after_lines(out) == [
        "the run ended at step 2, within its 5-step head warm-up: only its new heads trained, "
        "the rest of the model is as it came; give it a longer budget (--resume with more "
        "--steps or --minutes) to adapt the model itself"]


def test_the_summary_says_worse_when_the_run_forgot_general_text(tmp_path):
    """As all-MiniLM-L6-v2 continued at 1e-3: its own text better, general text worse (and its
    task wrecked); the warm-up's end is the start."""
    import json

    from lmlab.commands.pretrain_summary import _before_after_lines

    run = tmp_path / "run"
    run.mkdir()
    records = [{"kind": "eval", "step": 0, "mlm/mlm_loss": 11.0, "mlm/mlm_ppl": 6e4,
                "general/mlm/mlm_loss": 10.9, "general/mlm/mlm_ppl": 5e4,
                "head_warmup_steps": 6},
               {"kind": "eval", "step": 6, "mlm/mlm_loss": 7.82, "mlm/mlm_ppl": 2e3,
                "general/mlm/mlm_loss": 7.80, "general/mlm/mlm_ppl": 2e3},
               {"kind": "eval", "step": 60, "mlm/mlm_loss": 7.13, "mlm/mlm_ppl": 1e3,
                "general/mlm/mlm_loss": 8.07, "general/mlm/mlm_ppl": 3e3}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    lines = _before_after_lines(run)
    assert lines[0] == ("from its start (after the new heads' 6-step warm-up, step 6) to its "
                        "end (step 60):")
    assert "  general-text loss (masked tokens): 7.80 → 8.07 nats" in lines
    (warning,) = [line for line in lines if line.startswith("warning")]
    assert warning.startswith("warning: the model ended worse on general text than it began "
                              "(7.80 → 8.07 nats): it forgot")


def test_a_run_made_worse_is_not_offered_a_longer_run(source, toy, tmp_path):  # noqa: F811
    config = TrainConfig(objective="clm", init=str(source), out=str(tmp_path / "c"),
                         optimizer="adamw", lr=3.0, **{**TINY, "steps": 4})
    text = summary(pretraining.pretrain(config, toy), toy, config)
    assert "warning: the model ended worse" in text
    assert "(longer runs learn more)" not in text
    assert text.index("from its start") > text.index("continuation of held-out")  # example first


def test_a_resume_keeps_the_head_warmup_it_started_with(source, toy, tmp_path):  # noqa: F811
    """A resumed run that grew its budget does not plan a new (longer) head warm-up, which
    would freeze a body already training."""
    from lmlab.runs.checkpoints import list_checkpoints, read_state

    settings = dict(objective="mlm", init=str(source), out=str(tmp_path / "c"),
                    **{**TINY, "steps": 10})
    pretraining.pretrain(TrainConfig(**settings), toy)
    pretraining.pretrain(TrainConfig(**{**settings, "steps": 40, "resume": True}), toy)
    last = list_checkpoints(tmp_path / "c" / "checkpoints")[-1]
    assert last.name == "step-00000040"
    assert read_state(last)["loop"]["head_warmup_steps"] == 1  # 10% of the first 10 steps
