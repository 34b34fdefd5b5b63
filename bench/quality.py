"""Accuracy cost of each export recipe: perplexity and next-token agreement against fp32.

Why: channel-wise or symmetric int4 decodes faster (``bench.matrix``), but the cost in
accuracy must be measured, not assumed. No real 0.5B-7B checkpoint is reachable here, so
this measures what can be measured offline: the trained tiny models the project ships
(``resources/models/sidelight-demo``, ``tests/fixtures/tiny-coder``; fp32 IR) on text the
project ships (the dialogues they were trained on, and README.md, which they never saw),
and, with ``--model DIR`` (repeatable), the wider proxy models ``bench.quality_model``
trains on Python source (hidden 512 by default), scored on their held-out texts: the
standard-library files left out of training and this repository's ``engine/`` source.

What: each recipe of ``bench.matrix.RECIPES`` whose group size fits the model's hidden
(and intermediate) size is applied to the fp32 IR with NNCF's data-free
``compress_weights`` (what ``optimum-cli`` runs); every text is scored in windows of 128
tokens, one forward pass per window (teacher forcing), and the table gives the perplexity
and the share of positions where the compressed model's top-1 next token equals fp32's.

What it can and cannot show: the ranking of recipes by how much they disturb a trained
network's logits, and that a recipe does not break a model. It cannot give a 7B model's
sensitivity. The shipped tiny models have hidden size 64 (so group 128 does not apply and
channel-wise means 64-wide groups, not 3584-wide), 1-2 layers, and memorized training
text. The ``bench.quality_model`` proxies have realistic row widths (512+ weights, so
group 32/128 and channel-wise differ as they do on real models), but are still small,
briefly trained networks on one kind of text; large models have outlier channels (a few
hidden dimensions orders of magnitude larger) that make channel-wise int4 hurt
more, and neither proxy has them. Treat the figures as a lower bound of the
damage.

Run in the torch/optimum venv (it needs nncf and transformers), from the repository root::

    .venv-convert/bin/python -m bench.quality [--windows 8]
    .venv-convert/bin/python -m bench.quality --model CACHE/quality/code-512 \
        --no-tiny --windows 32
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.matrix import RECIPES, Recipe
from bench.quality_model import stdlib_dir

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "sidelight-demo": (
        REPO_ROOT / "resources/models/sidelight-demo",
        "tests/models/dialogues.json",
    ),
    "tiny-coder": (REPO_ROOT / "tests/fixtures/tiny-coder", "tests/models/coder_dialogues.json"),
}
WINDOW = 128


def texts_for(tokenizer: Any, dialogues_path: Path) -> dict[str, list[list[int]]]:
    """Token windows per text: the trained dialogues (chat-templated) and README.md."""
    data = json.loads(dialogues_path.read_text(encoding="utf-8"))
    trained: list[list[int]] = []
    for dialogue in data.get("dialogues", []):
        messages = [*dialogue["messages"], {"role": "assistant", "content": dialogue["reply"]}]
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        trained.append(tokenizer(text, add_special_tokens=False)["input_ids"][:WINDOW])
    for item in data.get("completions", []):
        ids = tokenizer(item["prompt"] + item["completion"], add_special_tokens=False)
        trained.append(ids["input_ids"][:WINDOW])
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    ids = tokenizer(readme, add_special_tokens=False)["input_ids"]
    unseen = [ids[i : i + WINDOW] for i in range(0, len(ids) - 1, WINDOW)]
    return {"trained dialogues": [t for t in trained if len(t) > 1], "README (unseen)": unseen}


def heldout_file_ids(tokenizer: Any, model_dir: Path) -> dict[str, list[list[int]]]:
    """Token ids of each file of a ``bench.quality_model`` model's held-out texts, by text
    name, in ``heldout.json``'s order.

    A file that changed since training (another sha256; likely for ``engine/``) is still
    unseen by the model and is kept, with a warning, but its ids differ from an earlier
    run's; a missing file is skipped.
    """
    manifest = json.loads((model_dir / "heldout.json").read_text(encoding="utf-8"))
    tokenizer.model_max_length = sys.maxsize  # whole files
    roots = {"stdlib": stdlib_dir(), "repo": REPO_ROOT}
    texts: dict[str, list[list[int]]] = {}
    for text in manifest["texts"]:
        files: list[list[int]] = []
        for item in text["files"]:
            path = roots[text["root"]] / item["path"]
            if not path.exists():
                logger.warning("%s: missing, skipped", path)
                continue
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != item["sha256"]:
                logger.warning("%s: changed since the model was trained", path)
            ids = tokenizer(data.decode("utf-8", errors="replace"), add_special_tokens=False)
            files.append(ids["input_ids"])
        texts[text["name"]] = files
    return texts


def model_texts(tokenizer: Any, model_dir: Path, cap: int) -> dict[str, list[list[int]]]:
    """Token windows of a ``bench.quality_model`` model's held-out texts (``heldout.json``).

    Each text's files are cut into non-overlapping windows of ``WINDOW`` tokens; ``cap``
    evenly spaced windows are kept, so every part of the text is represented.
    """
    texts: dict[str, list[list[int]]] = {}
    for name, files in heldout_file_ids(tokenizer, model_dir).items():
        windows = [ids[i : i + WINDOW] for ids in files for i in range(0, len(ids) - 1, WINDOW)]
        windows = [w for w in windows if len(w) > 1]
        if len(windows) > cap > 0:
            windows = [windows[i * len(windows) // cap] for i in range(cap)]
        texts[name] = windows
    return texts


def not_applicable(recipe: Recipe, hidden: int, intermediate: int) -> str | None:
    """Why an int4 group size does not fit the model's rows (None: it fits)."""
    if not recipe.mode.startswith("int4") or recipe.group_size <= 0:
        return None
    if hidden % recipe.group_size:
        return f"hidden {hidden}"
    if intermediate % recipe.group_size:
        return f"intermediate {intermediate}"
    return None


def logits_of(compiled: Any, ids: list[int]) -> np.ndarray:
    """One teacher-forced forward pass of a stateful optimum IR; returns [T, vocab] logits."""
    request = compiled.create_infer_request()
    request.reset_state()
    n = len(ids)
    inputs = {
        "input_ids": np.asarray([ids], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None, :],
        "beam_idx": np.zeros((1,), dtype=np.int32),
    }
    names = {p.get_any_name() for p in compiled.inputs}
    result = request.infer({k: v for k, v in inputs.items() if k in names})
    logits: np.ndarray = np.asarray(result["logits"])[0].astype(np.float64)
    return logits


def score(
    ref: list[np.ndarray], got: list[np.ndarray], windows: list[list[int]]
) -> dict[str, float]:
    nll, n, agree = 0.0, 0, 0
    for r, g, ids in zip(ref, got, windows, strict=True):
        targets = np.asarray(ids[1:])
        logp = g[:-1] - g[:-1].max(axis=1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
        nll -= float(logp[np.arange(len(targets)), targets].sum())
        n += len(targets)
        agree += int((r[:-1].argmax(axis=1) == g[:-1].argmax(axis=1)).sum())
    return {"ppl": math.exp(nll / n), "agree": agree / n, "tokens": n}


def compress(model_xml: Path, recipe: Recipe) -> Any:
    import nncf  # type: ignore[import-not-found]  # torch/optimum venv only
    import openvino as ov

    model = ov.Core().read_model(model_xml)
    kwargs = recipe.nncf_kwargs()
    kwargs["mode"] = getattr(nncf.CompressWeightsMode, kwargs["mode"].upper())
    return nncf.compress_weights(model, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--windows",
        type=int,
        default=12,
        help="windows of 128 tokens: README's for the tiny models, per text for --model",
    )
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    parser.add_argument(
        "--model",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also score a model made by bench.quality_model (its OUT folder; repeatable)",
    )
    parser.add_argument("--no-tiny", action="store_true", help="skip the shipped tiny models")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import openvino as ov
    from transformers import AutoTokenizer  # type: ignore[import-not-found]

    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32"}  # keep bf16 execution out of the comparison
    print("| model | recipe | text | tokens | perplexity | vs fp32 | top-1 agreement |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    entries: list[tuple[str, Path, Any]] = []
    if not args.no_tiny:
        for name, (folder, dialogues) in MODELS.items():
            entries.append((name, folder, REPO_ROOT / dialogues))
    for model_dir in args.model:
        entries.append((model_dir.name, model_dir / "ov", model_dir))
    for name, folder, source in entries:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if source.is_dir():
            texts = model_texts(tokenizer, source, args.windows)
        else:
            texts = texts_for(tokenizer, source)
            texts["README (unseen)"] = texts["README (unseen)"][: args.windows]
        model_config = json.loads((folder / "config.json").read_text())
        hidden = model_config["hidden_size"]
        intermediate = model_config["intermediate_size"]
        fp32 = core.compile_model(folder / "openvino_model.xml", "CPU", config)
        ref = {t: [logits_of(fp32, w) for w in ws] for t, ws in texts.items()}
        base = {t: score(ref[t], ref[t], ws) for t, ws in texts.items()}
        for t, s in base.items():
            print(f"| {name} | fp32 | {t} | {s['tokens']} | {s['ppl']:.3f} | 1.000x | 100% |")
        for rname in args.recipes:
            recipe = RECIPES[rname]
            reason = not_applicable(recipe, hidden, intermediate)
            if reason:
                print(f"| {name} | {rname} | - | | n/a: {reason} | | |")
                continue
            compiled = core.compile_model(
                compress(folder / "openvino_model.xml", recipe), "CPU", config
            )
            for t, ws in texts.items():
                s = score(ref[t], [logits_of(compiled, w) for w in ws], ws)
                print(
                    f"| {name} | {rname} | {t} | {s['tokens']} | {s['ppl']:.3f} | "
                    f"{s['ppl'] / base[t]['ppl']:.3f}x | {s['agree']:.1%} |"
                )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
