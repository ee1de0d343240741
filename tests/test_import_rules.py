"""DESIGN.md's import rules, held over the module graph read from the source
(tests/module_graph.py: every import counts, lazy ones and TYPE_CHECKING ones too)."""

import subprocess
import sys

import pytest

from tests.module_graph import (
    ROOT,
    circles,
    imports,
    lazy_imports,
    package_imports,
    reachable,
    within,
)

# (importer, imported): no module of the first package imports one of the second
NEVER = [
    ("lmlab.train", "lmlab.infer"),
    ("lmlab.data", "lmlab.objectives"),
    ("lmlab.infer", "lmlab.eval"),
    ("lmlab.eval", "lmlab.infer"),
    ("lmlab.finetune", "lmlab.infer"),  # both read text through runs/
    ("lmlab.export", "lmlab.finetune"),  # the task vocabulary it needs is tasks/
]
MODEL_MAY_IMPORT = ("lmlab.model", "lmlab.config", "lmlab.kernels")
# tasks/ is below its users (finetune, distill, export, serve, compare, planning) and below
# runs/, whose reading frames rows with it: it reads only the bottom of the graph.
TASKS_MAY_IMPORT = ("lmlab.tasks", "lmlab.config", "lmlab.data", "lmlab.objectives.traits",
                    "lmlab.atomic", "lmlab.extras")  # the root's helpers, below all but config/
# The modules of finetune/ a consumer may import besides tasks/: infer/'s predict reads a
# fine-tuned run through its task's classes (they sit above runs/ and model/, so tasks/ cannot
# hold them); serve/ predicts through infer/, and compare/ imports none but its training
# drivers'. export/ imports none (NEVER).
FINETUNE_FOR_CONSUMERS = {
    "lmlab.infer": {"lmlab.finetune.base", "lmlab.finetune.outputs", "lmlab.finetune.registry"},
    "lmlab.serve": set(),
    "lmlab.compare": set(),
}
CONSUMERS = ("lmlab.infer", "lmlab.eval", "lmlab.export", "lmlab.serve", "lmlab.compare",
             "lmlab.harness")
# training, and a task's trainer: what reading a run must never load
TRAINERS = ("lmlab.train", "lmlab.finetune.entry")
# The objective lab trains its sub-runs: these modules of compare/ drive training by design,
# and are the only consumers' modules that may reach it.
TRAINING_DRIVERS = {
    "lmlab.compare.subrun",  # pre-trains and fine-tunes one sub-run
    "lmlab.compare.cluster",  # runs sub-runs on Ray
}
# Consumers' modules that still reach training through a module they import, each named so
# the list can only shrink.
STILL_REACHING: set[str] = set()


def _offending(importer: str, imported: str) -> list[tuple[str, str]]:
    return sorted((module, other) for module, others in imports().items()
                  if within(module, importer) for other in others if within(other, imported))


def test_no_import_circles():
    assert circles() == []


def test_no_import_circles_among_packages():
    """Packages as wholes: config → objectives → model → data → config was a circle though no
    two modules formed one."""
    assert circles(package_imports()) == []


def test_config_imports_only_config():
    """config/ is the bottom: it reads no other package of lmlab, not even inside a function,
    so parsing a config loads nothing else."""
    outside = sorted((module, other) for module, others in imports().items()
                     if within(module, "lmlab.config") for other in others
                     if not within(other, "lmlab.config"))
    assert outside == []
    assert package_imports()["lmlab.config"] == frozenset()


@pytest.mark.parametrize("importer, imported", NEVER)
def test_a_package_never_imports_another(importer, imported):
    assert _offending(importer, imported) == []


def test_data_read_side_never_imports_the_prepare_side():
    """data/ in its parts: preparation/ (text → a dataset directory) may read the rest of data/,
    but the directory as training reads it (data/'s own modules) and text/ import nothing of
    preparation/, so training, evaluation and fine-tuning load no part of prepare."""
    offending = sorted((module, other) for module, others in imports().items()
                       if within(module, "lmlab.data")
                       and not within(module, "lmlab.data.preparation")
                       for other in others if within(other, "lmlab.data.preparation"))
    assert offending == []


def test_reading_text_imports_nothing_else_of_data():
    """text/ (the user's files, read for every consumer) needs only data/'s one exception."""
    outside = sorted((module, other) for module, others in imports().items()
                     if within(module, "lmlab.data.text") for other in others
                     if within(other, "lmlab") and not within(other, "lmlab.data.text")
                     and other != "lmlab.data.errors")
    assert outside == []


def test_the_model_imports_only_config_and_kernels():
    outside = sorted((module, other) for module, others in imports().items()
                     if within(module, "lmlab.model") for other in others
                     if not any(within(other, allowed) for allowed in MODEL_MAY_IMPORT))
    assert outside == []


def test_only_the_entry_points_import_the_plan():
    """planning/ sizes a run for a budget (timing a few real steps of each candidate): only the
    entry points (the command line, lmlab.plan(...)) ask it, and it asks nothing of the
    objective lab."""
    users = sorted(module for module, others in imports().items()
                   if any(within(other, "lmlab.planning") for other in others)
                   and not within(module, "lmlab.planning")
                   and not (within(module, "lmlab.commands") or module == "lmlab"))
    assert users == []
    assert not any(within(other, "lmlab.compare") for module, others in imports().items()
                   if within(module, "lmlab.planning") for other in others)


def test_the_planning_package_leaves_lmlab_plan_the_function():
    """A package named `plan` would replace `lmlab.plan(...)` once imported."""
    import lmlab
    import lmlab.planning.sizing  # noqa: F401

    assert callable(lmlab.plan)


def test_tasks_import_nothing_above_them():
    outside = sorted((module, other) for module, others in imports().items()
                     if within(module, "lmlab.tasks") for other in others
                     if not any(within(other, allowed) for allowed in TASKS_MAY_IMPORT))
    assert outside == []


@pytest.mark.parametrize("consumer", sorted(FINETUNE_FOR_CONSUMERS))
def test_consumers_import_finetune_only_as_design_says(consumer):
    allowed = FINETUNE_FOR_CONSUMERS[consumer]
    outside = sorted((module, other) for module, others in imports().items()
                     if within(module, consumer) and module not in TRAINING_DRIVERS
                     for other in others
                     if within(other, "lmlab.finetune") and other not in allowed)
    assert outside == []


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_consumers_never_reach_training(consumer):
    reaching = sorted(
        module for module in imports() if within(module, consumer)
        and module not in TRAINING_DRIVERS | STILL_REACHING
        and any(within(other, trainer) for other in reachable(module)
                for trainer in TRAINERS if not _through_a_driver(module, other)))
    assert reaching == []


def test_the_exceptions_are_still_needed():
    """A module that no longer reaches training leaves STILL_REACHING."""
    trainers = [module for module in imports() if any(within(module, t) for t in TRAINERS)]
    for module in STILL_REACHING:
        assert any(not _through_a_driver(module, t) for t in trainers if t in reachable(module)), \
            module


def _through_a_driver(module: str, other: str) -> bool:
    """Whether every way from `module` to `other` passes through a training driver."""
    seen, todo = set(), [module]
    while todo:
        for step in imports()[todo.pop()] - seen - TRAINING_DRIVERS:
            if step == other:
                return False
            seen.add(step)
            todo.append(step)
    return True


def test_serving_loads_no_trainer():
    """`lmlab serve`, as it runs: every module of serve/ imported, no training module with it."""
    serve = [module for module in imports() if within(module, "lmlab.serve")]
    code = (f"import sys; import {', '.join(serve)}; "
            "print([m for m in sys.modules if m.startswith('lmlab.train') "
            "or m == 'lmlab.finetune.entry'])")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, check=True).stdout
    assert loaded.strip() == "[]"


# Imports of lmlab modules inside functions, counted over lmlab/: DESIGN keeps them for heavy
# third-party libraries (a module that wraps datatrove, the registry that loads torch while the
# parser is built) and command handlers. The count may fall, never rise: lower it with each
# import moved to the top of its module.
MOST_LAZY_IMPORTS = 66


def test_lazy_imports_of_lmlab_do_not_grow():
    found = {f"{module}:{line} → {other}" for module, others in lazy_imports().items()
             for other, line in others}
    assert len(found) <= MOST_LAZY_IMPORTS, "\n".join(sorted(found))


def test_the_rules_see_the_whole_package():
    """A graph that read nothing would pass every rule above."""
    assert len(imports()) > 150
    assert "lmlab.objectives" in package_imports()["lmlab.train"]
    assert "lmlab.train.loop" in reachable("lmlab.train.entry")
