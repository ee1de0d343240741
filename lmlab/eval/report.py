"""An evaluation's results as a table for the terminal, and as JSON written atomically."""

from __future__ import annotations

import json
from pathlib import Path

from lmlab.atomic import make_directory, write_text_atomic


def write_json(result: dict, path: str | Path) -> None:
    path = Path(path)
    make_directory(path.parent)
    write_text_atomic(path, json.dumps(result, indent=2) + "\n")


def text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    line = lambda row: "  ".join(  # noqa: E731
        cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths,
                                                                                   strict=True)))
    return [line(header), *map(line, rows)]


def _perplexity_lines(result: dict) -> list[str]:
    data = result["data"]
    lines = [f"text: {data['source']}: {data['documents']:,} documents, {data['tokens']:,} "
             f"tokens, {data['bytes']:,} bytes"]
    if data["invalid_utf8_bytes"]:
        lines.append(f"({data['invalid_utf8_bytes']:,} bytes were not UTF-8: each was read as "
                     "U+FFFD, and counts as one byte in bits per byte)")
    rows = [[m["rule"], m["metric"], f"{m['perplexity']:.3f}", f"{m['bits_per_byte']:.4f}",
             f"{m['tokens_scored']:,}", f"{m['window']}/{m['stride']}",
             f"{m['tokens_per_second']:,.0f}"] for m in result["perplexity"]]
    lines += text_table(["rule", "metric", "value", "bits/byte", "tokens scored", "window/stride",
                     "tokens/s"], rows)
    return lines


def _minimal_pair_lines(result: dict) -> list[str]:
    runs = result["minimal_pairs"]
    lines = [f"minimal pairs: {len(result['pairs']['files'])} files, "
             f"{result['pairs']['pairs']:,} pairs; accuracy (ties count as wrong)"]
    header = ["group", *(r["rule"] for r in runs)]
    rows = [["overall", *(f"{r['accuracy']:.4f}" for r in runs)],
            ["ties", *(f"{r['ties']:,}" for r in runs)]]
    for key, values in runs[0]["groups"].items():
        for value in values:
            rows.append([f"{key} {value}",
                         *(f"{r['groups'][key][value]['accuracy']:.4f}" for r in runs)])
    return lines + text_table(header, rows)


def format_report(result: dict) -> str:
    lines = [f"run {result['run']}  checkpoint {result['checkpoint']}  "
             f"objective {result['objective']}"]
    if "perplexity" in result:
        lines += ["", *_perplexity_lines(result)]
    if "minimal_pairs" in result:
        lines += ["", *_minimal_pair_lines(result)]
    rules = {m["rule"]: m["description"] for part in ("perplexity", "minimal_pairs")
             for m in result.get(part, [])}
    lines += ["", *(f"{name}: {description}" for name, description in rules.items())]
    return "\n".join(lines)
