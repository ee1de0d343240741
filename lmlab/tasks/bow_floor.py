"""The bag-of-words floor a fine-tuned classifier is read against: logistic regression on the
tf-idf of word unigrams and bigrams (scikit-learn, the optional extra `lmlab[baselines]`),
fitted on the same training rows the model was fine-tuned on and scored on the same
validation and test rows with the metrics the fine-tuned model is scored by.

It knows nothing of word order beyond bigrams and nothing of language beyond the training
rows, so a fine-tuned model that scores below it has learned less from the task than word
counts give; pre-training has not yet paid for itself there. `lmlab finetune --baseline bow`
keeps it beside the model's scores in results.json, and `lmlab compare` beside every
classification probe's.

It applies to the tasks whose traits say so (lmlab.tasks.traits: rows of a table, each
with one label); answer spans, tags and numbers have no such floor. scikit-learn is imported
only when a floor is fitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lmlab.extras import require_extra
from lmlab.tasks.finetune_config import FinetuneConfig
from lmlab.tasks.metrics import classification_metrics
from lmlab.tasks.splits import Splits, read_splits
from lmlab.tasks.traits import TASKS

if TYPE_CHECKING:
    from lmlab.tasks.readers import TextExample

NAME = "bag-of-words"
EXTRA = "baselines"  # the lmlab extra that installs scikit-learn
MODEL = "logistic regression on tf-idf word 1-2-grams"
# Words and each punctuation mark. scikit-learn's default pattern drops one-letter words and
# so the "n't" of tokenised English ("is n't", as SST-2 writes it), which carries much of a
# sentence's sentiment; here it is "n", "'", "t", and the bigram "is n" keeps the negation.
TOKENS = r"(?u)\w+|[^\w\s]"
MAX_ITERATIONS = 1000  # lbfgs's default 100 stops short on large vocabularies


def require_scikit_learn(needed_by: str = "--baseline bow") -> None:
    """Refuse in one line, naming `pip install 'lmlab[baselines]'`, when scikit-learn is
    missing."""
    require_extra("sklearn", EXTRA, needed_by, package="scikit-learn")


class BagOfWords:
    """Examples → sparse feature rows: the tf-idf of a text's word 1-2-grams, or for a text pair
    [v(A), v(B), shared(A, B)] over one vocabulary, shared being 1 at each n-gram both texts
    hold. Keeping the two texts apart lets a word weigh differently in each (a hypothesis's
    "not" is not a premise's), which "A [SEP] B" as one text cannot; the shared n-grams are
    the overlap that decides paraphrase and much of entailment, which no linear model of the
    two vectors side by side can see (as InferSent's u*v features, Conneau et al. 2017; 0/1
    rather than the product of two tf-idf weights, too small for a regularised fit to weigh)."""

    def __init__(self, text_pairs: bool) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.text_pairs = text_pairs
        self.vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True,
                                          token_pattern=TOKENS)

    def _texts(self, examples: Sequence[TextExample]) -> tuple[list[str], list[str]]:
        return [e.text for e in examples], [e.text_pair or "" for e in examples]

    def fit(self, examples: Sequence[TextExample]) -> BagOfWords:
        first, second = self._texts(examples)
        self.vectorizer.fit(first + second if self.text_pairs else first)
        return self

    def __call__(self, examples: Sequence[TextExample]):
        from scipy import sparse

        first, second = self._texts(examples)
        a = self.vectorizer.transform(first)
        if not self.text_pairs:
            return a
        b = self.vectorizer.transform(second)
        shared = (a.multiply(b) > 0).astype(a.dtype)
        return sparse.hstack([a, b, shared]).tocsr()

    @property
    def size(self) -> int:
        return len(self.vectorizer.vocabulary_) * (3 if self.text_pairs else 1)


def fit_floor(task: str, splits: Splits) -> dict:
    """The floor of `task` fitted on `splits.train` and scored on its validation and test
    rows with the metrics a fine-tuned classifier is scored by, as results.json keeps it under
    "baseline"."""
    import numpy as np
    import sklearn
    from sklearn.linear_model import LogisticRegression

    def gold(examples: Sequence[TextExample]) -> list[int]:
        return [splits.labels.index(e.label) for e in examples]

    features = BagOfWords(any(e.text_pair is not None for e in splits.train)).fit(splits.train)
    model = LogisticRegression(max_iter=MAX_ITERATIONS)
    model.fit(features(splits.train), gold(splits.train))
    floor = {"name": NAME, "model": MODEL + (" of each text and those both share"
                                             if features.text_pairs else ""),
             "scikit_learn": sklearn.__version__, "train_rows": len(splits.train),
             "features": features.size, "main_metric": TASKS[task].main_metric}
    for split in ("validation", "test"):
        examples = getattr(splits, split)
        if examples is None:
            continue
        scores = model.predict_proba(features(examples))
        predicted = [int(model.classes_[np.argmax(row)]) for row in scores]
        floor[split] = classification_metrics(gold(examples), predicted, len(splits.labels))
    return floor


def floor_of_config(cfg: FinetuneConfig) -> dict:
    """The floor of the splits `cfg` names, read as fine-tuning reads them."""
    return fit_floor(cfg.task, read_splits(cfg))


def floor_line(floor: dict, results: dict) -> str:
    """The floor as the fine-tuning summary prints it, beside the model's `results` (split →
    metrics), and the splits where the model scores below it."""
    metric = floor["main_metric"]
    splits = [split for split in ("validation", "test") if split in floor]
    shown = "; ".join(f"{split} {metric}: {floor[split][metric]:.4f}" for split in splits)
    below = [split for split in splits
             if split in results and results[split][metric] < floor[split][metric]]
    return (f"{NAME} floor ({MODEL}, same training rows): {shown}"
            + (f"; the fine-tuned model is below it on {' and '.join(below)}" if below else ""))
