"""lmlab's GGUF exports as llama.cpp itself runs them: greedy continuations and logits.

For a causal run of each GGUF family (`modern-tiny`, llama.cpp's `llama`; `gpt2-tiny`, its
`gpt2`), pre-trained briefly on the built-in corpus, `lmlab export --format gguf` writes the
file in f16 (the default) and f32; llama-cpp-python (an optional package that builds llama.cpp,
`pip install llama-cpp-python`, not a dependency of lmlab) loads each. Per prompt:

  * both sides read the same token ids: those `lmlab generate` reads (the tokenizer's, no
    [BOS] or other special token added; the file says add_bos_token false), fed to llama.cpp
    as ids. Whether llama.cpp's own tokenizer (`Llama.tokenize`, no BOS, no special tokens)
    gives the same ids for the text is recorded beside;
  * greedy continuations: `lmlab generate RUN PROMPT --greedy` against llama.cpp's
    `Llama.generate(ids, top_k=1, temp=0)`, both ending at [EOS] or --max-new-tokens: equal,
    or the first position where they differ;
  * logits: llama.cpp's for the prompt (`logits_all`) against the run's model in fp32 (its
    weights as trained, not rounded to f16): the largest absolute difference at the first
    generated step (the prompt's last position) and over every prompt position, with
    llama.cpp's default f16 KV cache; for f32 files also with an f32 one, and for gpt2 against
    lmlab with its GELU read through f16 as ggml's CPU GELU (an f16 table) reads it.

    python benchmarks/llama_cpp_parity.py   # two tiny runs of 600 steps, then about a minute
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch
from record import ROOT, machine, write_results

FAMILIES = ("modern-tiny", "gpt2-tiny")
DTYPES = ("f16", "f32")
PROMPTS = (
    "Return a new list",
    "If the file does not exist,",
    "The default value is 1024 (see below) .",
    "def main():\n    ",
)


def lmlab(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "lmlab", *args], capture_output=True,
                          text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"lmlab {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def pretrained(preset: str, work: Path, steps: int, seed: int) -> Path:
    """A causal run of `preset` (reused when it is already there)."""
    run = work / "runs" / preset
    if not (run / "config.json").is_file():
        lmlab("pretrain", "--objective", "clm", "--model", preset, "--steps", str(steps),
              "--seed", str(seed), "--out", str(run), "--overwrite")
    return run


def exported(run: Path, dtype: str, work: Path) -> tuple[Path, str]:
    """(the GGUF file, what the export printed)."""
    out = work / "gguf" / f"{run.name}-{dtype}.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    printed = lmlab("export", str(run), "--format", "gguf", "--dtype", dtype, "--out", str(out))
    return out, printed.strip()


def lmlab_greedy(run: Path, prompt: str, max_new_tokens: int) -> dict:
    """`lmlab generate --greedy --json`: {"text", "ids", "finish_reason", ...}."""
    printed = lmlab("generate", str(run), prompt, "--greedy", "--max-new-tokens",
                    str(max_new_tokens), "--json", "--device", "cpu")
    return json.loads(printed.strip().splitlines()[-1])


def llama_greedy(llm, ids: list[int], max_new_tokens: int) -> dict:
    """llama.cpp's greedy continuation of `ids`, ending at its end-of-text token."""
    eos, found = llm.token_eos(), []
    llm.reset()
    for token in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                              repeat_penalty=1.0, reset=True):
        if token == eos:
            return {"ids": found, "finish_reason": "eos"}
        found.append(int(token))
        if len(found) == max_new_tokens:
            break
    return {"ids": found, "finish_reason": "length"}


@torch.no_grad()
def logits_difference(llm, run_model, ids: list[int]) -> dict:
    """Largest |llama.cpp − lmlab| of the logits at the prompt's last position (the first
    generated step) and over every prompt position."""
    from lmlab.model import MaskSpec

    llm.reset()
    llm.eval(ids)
    theirs = torch.from_numpy(llm.scores[: len(ids)].copy()).float()
    ours = run_model(torch.tensor([ids]), MaskSpec("causal"))["lm"][0].float()
    difference = (theirs - ours).abs()
    return {"first_step": float(difference[-1].max()),
            "every_prompt_position": float(difference.max()),
            "first_step_argmax_equal": int(theirs[-1].argmax()) == int(ours[-1].argmax())}


def with_gelu_through_f16(model):
    """A copy of `model` whose GELU reads its input and gives its output in f16, as ggml's CPU
    GELU does (a table of f16 values indexed by the f16 input)."""
    import copy

    from lmlab.model.layers import MLP, gelu_tanh

    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, MLP):
            module.act = lambda x: gelu_tanh(x.half().float()).half().float()
    return model


def first_difference(a: list[int], b: list[int]) -> int | None:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return None if len(a) == len(b) else min(len(a), len(b))


def loaded(file: Path, context: int, threads: int, kv_cache: str = "f16"):
    import llama_cpp

    kv = {"f16": llama_cpp.GGML_TYPE_F16, "f32": llama_cpp.GGML_TYPE_F32}[kv_cache]
    return llama_cpp.Llama(model_path=str(file), n_ctx=context, n_batch=context, seed=0,
                           logits_all=True, n_threads=threads, type_k=kv, type_v=kv,
                           verbose=False)


def compare(run_dir: Path, file: Path, dtype: str, max_new_tokens: int, threads: int) -> list:
    """Per prompt: token ids, greedy continuations and logits, llama.cpp at its defaults (an
    f16 KV cache); an f32 file's logits also with an f32 KV cache."""
    from lmlab.infer.generate import prepare_prompt
    from lmlab.runs import load_run

    run = load_run(run_dir)  # the best checkpoint, as export and generate take it
    model = run.model.float().eval()
    prompts = [(prompt, prepare_prompt(run, prompt, max_new_tokens).ids) for prompt in PROMPTS]
    llm, found = loaded(file, run.max_seq_len, threads), []
    for prompt, ids in prompts:
        own = [int(token) for token in llm.tokenize(prompt.encode(), add_bos=False,
                                                    special=False)]
        ours = lmlab_greedy(run_dir, prompt, max_new_tokens)
        theirs = llama_greedy(llm, ids, max_new_tokens)
        differs = first_difference(ours["ids"], theirs["ids"])
        found.append({
            "prompt": prompt, "prompt_ids": ids,
            "llama_cpp_tokenize_equal": own == ids,
            **({} if own == ids else {"llama_cpp_tokenize_ids": own}),
            "greedy_equal": differs is None and ours["finish_reason"] == theirs["finish_reason"],
            "first_differing_position": differs,
            "lmlab": {"ids": ours["ids"], "finish_reason": ours["finish_reason"],
                      "text": ours["text"]},
            "llama_cpp": {"ids": theirs["ids"], "finish_reason": theirs["finish_reason"],
                          "text": llm.detokenize(theirs["ids"]).decode("utf-8", "replace")},
            "logits_max_abs_difference": logits_difference(llm, model, ids)})
    llm.close()
    if dtype == "f32":
        llm = loaded(file, run.max_seq_len, threads, kv_cache="f32")
        gelu_f16 = with_gelu_through_f16(model) if run.model.cfg.activation == "gelu_tanh" else None
        for case, (_, ids) in zip(found, prompts, strict=True):
            case["logits_max_abs_difference_f32_kv_cache"] = logits_difference(llm, model, ids)
            if gelu_f16 is not None:
                case["logits_max_abs_difference_f32_kv_cache_lmlab_gelu_through_f16"] = \
                    logits_difference(llm, gelu_f16, ids)
        llm.close()
    return found


def summary(prompts: list[dict]) -> dict:
    """Counts over the prompts, and each logits difference at its largest."""
    found = {"greedy_equal": sum(p["greedy_equal"] for p in prompts),
             "llama_cpp_tokenize_equal": sum(p["llama_cpp_tokenize_equal"] for p in prompts)}
    for key in [k for k in prompts[0] if k.startswith("logits_max_abs_difference")]:
        found[key] = {"first_step": max(p[key]["first_step"] for p in prompts),
                      "every_prompt_position": max(p[key]["every_prompt_position"]
                                                   for p in prompts),
                      "first_step_argmax_equal": sum(p[key]["first_step_argmax_equal"]
                                                     for p in prompts)}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/lmlab-llama-cpp"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                        "llama_cpp_parity.json")
    args = parser.parse_args()
    import llama_cpp

    torch.set_num_threads(args.threads)
    families, every = {}, []
    for preset in FAMILIES:
        run = pretrained(preset, args.work, args.steps, args.seed)
        families[preset] = {}
        for dtype in DTYPES:
            file, printed = exported(run, dtype, args.work)
            prompts = compare(run, file, dtype, args.max_new_tokens, args.threads)
            every += prompts
            families[preset][dtype] = {"lmlab_export": printed.splitlines(),
                                       **summary(prompts), "prompts": prompts}
    results = {
        "machine": machine(threads=args.threads),
        "llama_cpp_python": llama_cpp.__version__,
        "runs": f"lmlab pretrain --objective clm --model PRESET --steps {args.steps} "
                f"--seed {args.seed} (built-in corpus), best checkpoint",
        "prompts": len(PROMPTS),
        "max_new_tokens": args.max_new_tokens,
        "prompt_ids": "lmlab's (no [BOS] added, as lmlab generate reads a prompt), fed to "
                      "llama.cpp as ids; llama_cpp_tokenize_equal: Llama.tokenize(text, "
                      "add_bos=False, special=False) gives the same ids",
        "greedy": "lmlab generate RUN PROMPT --greedy; llama_cpp.Llama.generate(prompt ids, "
                  "top_k=1, temp=0, repeat_penalty=1), both ending at [EOS]",
        "logits": "llama.cpp (logits_all, its default f16 KV cache; _f32_kv_cache: an f32 "
                  "one) against the run's model in fp32, its weights as trained; "
                  "_lmlab_gelu_through_f16: lmlab's GELU reading and giving f16 values, as "
                  "ggml's CPU GELU table does",
        "greedy_equal": sum(p["greedy_equal"] for p in every),
        "llama_cpp_tokenize_equal": sum(p["llama_cpp_tokenize_equal"] for p in every),
        "cases": len(every),
        "families": families,
    }
    write_results(args.out, results, args.work)
    print(json.dumps({preset: {dtype: {key: value for key, value in found.items()
                                       if key not in ("prompts", "lmlab_export")}
                               for dtype, found in by_dtype.items()}
                      for preset, by_dtype in families.items()}, indent=2))


if __name__ == "__main__":
    main()
