"""Build the tiny cross-encoder reranker used by the ``/v1/rerank`` tests.

What it builds
--------------
A BERT-architecture cross-encoder (``BertForSequenceClassification`` with one label: hidden
32, 2 layers, 2 heads) with a small WordPiece tokenizer, trained briefly (seeded) to tell
whether a document is about the same topic as a query. It is exported by optimum-intel
(``--task text-classification``, fp32 weights) to OpenVINO IR with its tokenizer converted by
openvino-tokenizers, into ``tests/fixtures/tiny-rerank/`` (well under 1 MB, committed), with
``reference.json``: held-out queries, their documents and the scores the same checkpoint
gives through transformers (torch), ``sigmoid(logit)`` as cross-encoders report them.

What the reference can and cannot show
--------------------------------------
Queries and documents are made from templates over eight topics, each with its own
keywords; a document is relevant when it names a keyword of the query's topic. Training sees
some templates; ``reference.json`` uses others it never saw, so ranking the relevant
document first there means the model learnt the topic match, not the sentences. Matching
those scores and that order through Sidelight shows the whole path is right: pairing the
query with each document (``[CLS] query [SEP] document [SEP]`` with token types), the model,
the sigmoid, the sort, ``top_n``. It says nothing of how well a real reranker ranks real
text: the model is tiny and the topics are made up.

Why
---
Rerank needs a cross-encoder with known scores to test against, and the hub is not
reachable here, so the model is made here, as ``build_tiny_embedding_model.py`` does for
embeddings.

How to rerun
------------
With the conversion venv (torch, transformers, optimum-intel, openvino-tokenizers; see
``tests/models/build_tiny_model.py``)::

    nice -n 19 .venv-convert/bin/python tests/models/build_tiny_rerank_model.py
"""

from __future__ import annotations

import json
import logging
import random
import sys
from pathlib import Path
from typing import Any

from tiny_encoder import bert_tokenizer, bert_wordpiece, export_encoder  # sibling (by path)

LOG = logging.getLogger("build_tiny_rerank_model")

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIR = REPO_ROOT / "tests" / "fixtures" / "tiny-rerank"
# Training from scratch finds the topic match on some seeds only (the warm-up stops with a
# message on the others, or the reference check fails); this is one that passes both.
SEED = 3
MIN_MARGIN = 1.0  # logits between the relevant document and the best of the others
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SHAPE = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
TOPICS = {
    "python": ("python", "pip", "virtualenv", "pytest"),
    "openvino": ("openvino", "npu", "inference", "compiler"),
    "cooking": ("pasta", "oven", "recipe", "garlic"),
    "weather": ("rain", "forecast", "storm", "umbrella"),
    "trains": ("train", "station", "ticket", "platform"),
    "music": ("guitar", "piano", "melody", "concert"),
    "garden": ("tomato", "soil", "seeds", "watering"),
    "money": ("budget", "invoice", "taxes", "savings"),
}
TRAIN_QUERIES = (
    "how do i use {w}",
    "what is the best {w}",
    "tell me about {w}",
    "problem with my {w}",
    "{w} help",
)
TRAIN_DOCUMENTS = (
    "this guide explains {w} and {v} step by step.",
    "notes on {w}: {v} matters most.",
    "a short story about {w} and {v}.",
    "we compared {w} with {v} last week.",
    "everything you need to know about {w}.",
)
# Held out: the reference set is written with these only.
TEST_QUERIES = ("why is my {w} so slow", "where can i learn about {w}")
TEST_DOCUMENTS = ("our team wrote about {w} and {v} today.", "{w} tips: start with {v}.")
MAX_WARM_UP_STEPS = 5000  # bare keyword pairs only: the topic match is learnt there first
TRAIN_STEPS = 2000
BATCH = 32


def _sentence(template: str, topic: str, rng: random.Random) -> str:
    first, second = rng.sample(TOPICS[topic], 2)
    return template.format(w=first, v=second)


def _filler() -> list[str]:
    """Every non-keyword word of every template, the held-out ones too."""
    keywords = {w for words in TOPICS.values() for w in words}
    templates = TRAIN_QUERIES + TRAIN_DOCUMENTS + TEST_QUERIES + TEST_DOCUMENTS
    words = {w for t in templates for w in t.replace(".", " ").replace(":", " ").split()}
    return sorted(words - keywords - {"{w}", "{v}"})


FILLER = _filler()


def _jumble(keywords: list[str], rng: random.Random, length: int) -> str:
    """``keywords`` among ``length`` random filler words, in random places."""
    words = [rng.choice(FILLER) for _ in range(length)]
    for keyword in keywords:
        words.insert(rng.randrange(len(words) + 1), keyword)
    return " ".join(words)


def training_pair(rng: random.Random, kind: str) -> tuple[str, str, float]:
    """A query and a document; label 1.0 when they share a topic.

    ``kind``: ``bare`` (one keyword each), ``jumble`` (keywords among random filler words,
    so any word but a keyword is noise) or ``template`` (the training templates).
    """
    topic = rng.choice(sorted(TOPICS))
    other = topic if rng.random() < 0.5 else rng.choice(sorted(set(TOPICS) - {topic}))
    label = float(other == topic)
    if kind == "bare":
        return rng.choice(TOPICS[topic]), rng.choice(TOPICS[other]), label
    if kind == "jumble":
        query = _jumble([rng.choice(TOPICS[topic])], rng, rng.randint(1, 5))
        document = _jumble(rng.sample(TOPICS[other], 2), rng, rng.randint(2, 8))
        return query, document, label
    query = _sentence(rng.choice(TRAIN_QUERIES), topic, rng)
    document = _sentence(rng.choice(TRAIN_DOCUMENTS), other, rng)
    return query, document, label


def reference_cases(rng: random.Random) -> list[dict[str, Any]]:
    """Held-out queries, each with one relevant document among four of other topics."""
    cases = []
    for topic in ("python", "openvino", "weather", "music"):
        query = _sentence(rng.choice(TEST_QUERIES), topic, rng)
        others = rng.sample(sorted(set(TOPICS) - {topic}), 4)
        documents = [_sentence(rng.choice(TEST_DOCUMENTS), t, rng) for t in [topic, *others]]
        order = list(range(len(documents)))
        rng.shuffle(order)
        shuffled = [documents[i] for i in order]
        cases.append({"query": query, "documents": shuffled, "relevant": order.index(0)})
    return cases


def vocabulary() -> dict[str, int]:
    """Every word of the corpus whole, and every letter alone and as a ``##`` piece (so an
    unknown word is spelled out, not one ``[UNK]``), in a fixed order: the tokenizers
    trainer breaks frequency ties differently from run to run, which changes every id."""
    keywords = [w for words in TOPICS.values() for w in words]
    words = sorted({*keywords, *FILLER})
    letters = sorted({c for w in words for c in w} | set("abcdefghijklmnopqrstuvwxyz0123456789"))
    punctuation = list(".,:;!?'\"()-_/")
    tokens = [*SPECIALS, *punctuation, *letters, *(f"##{c}" for c in letters), *words]
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


def build_checkpoint(hf_dir: Path) -> Any:
    """Train the tokenizer and the model; save both to ``hf_dir``; return the model."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    raw = bert_wordpiece(vocabulary())
    tokenizer = bert_tokenizer(raw, SHAPE["max_position_embeddings"])
    tokenizer.save_pretrained(str(hf_dir))
    config = BertConfig(vocab_size=raw.get_vocab_size(), num_labels=1, **SHAPE)
    model = BertForSequenceClassification(config)
    _train(model, tokenizer, random.Random(SEED))
    model.eval().save_pretrained(str(hf_dir), safe_serialization=True)
    return model, tokenizer


def _train(model: Any, tokenizer: Any, rng: random.Random) -> None:
    """Bare keyword pairs until the topic match is found, then sentences as well.

    From scratch, a match across the two segments sits at chance for a long while in
    sentences (nothing in one segment alone predicts the label); on bare keyword pairs it
    is found within a few hundred or thousand steps, and then carries over to sentences.
    """
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    recent: list[float] = []
    step = 0
    while step < MAX_WARM_UP_STEPS and (len(recent) < 50 or sum(recent) / 50 > 0.05):
        recent = [*recent[-49:], _step(model, tokenizer, optimizer, rng, ["bare"])]
        step += 1
        if step % 250 == 0:
            LOG.info("warm-up step %d: loss %.4f", step, sum(recent) / len(recent))
    if sum(recent) / len(recent) > 0.05:
        raise SystemExit(f"no topic match after {step} warm-up steps; try another SEED")
    for group in optimizer.param_groups:
        group["lr"] = 3e-4
    for step in range(TRAIN_STEPS):
        loss = _step(model, tokenizer, optimizer, rng, ["bare", "jumble", "jumble", "template"])
        if step % 250 == 0 or step == TRAIN_STEPS - 1:
            LOG.info("step %d: loss %.4f", step, loss)


def _step(
    model: Any, tokenizer: Any, optimizer: Any, rng: random.Random, kinds: list[str]
) -> float:
    import torch

    pairs = [training_pair(rng, rng.choice(kinds)) for _ in range(BATCH)]
    batch = tokenizer(
        [q for q, _, _ in pairs], [d for _, d, _ in pairs], padding=True, return_tensors="pt"
    )
    labels = torch.tensor([label for _, _, label in pairs])
    logits = model(**batch).logits.squeeze(-1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.item())


def reference(model: Any, tokenizer: Any) -> dict[str, Any]:
    """The held-out cases with torch's scores: what Sidelight must reproduce."""
    import torch

    cases = reference_cases(random.Random(SEED + 1))
    model.eval()
    for case in cases:
        batch = tokenizer(
            [case["query"]] * len(case["documents"]),
            case["documents"],
            padding=True,
            return_tensors="pt",
        )
        with torch.no_grad():
            logits = model(**batch).logits.squeeze(-1)
        scores = torch.sigmoid(logits).tolist()
        case["scores"] = scores
        case["logits"] = logits.tolist()
        case["order"] = sorted(range(len(scores)), key=lambda i: -scores[i])
        best_other = max(x for i, x in enumerate(case["logits"]) if i != case["relevant"])
        if case["logits"][case["relevant"]] - best_other < MIN_MARGIN:
            raise SystemExit(
                f"the relevant document is not clearly first: {case}; try another SEED"
            )
    return {
        "note": (
            "Scores of the same checkpoint through transformers (torch, fp32): "
            "sigmoid(logit) of each (query, document) pair, the logits beside them "
            "(a closer check where the sigmoid saturates). Written by "
            "tests/models/build_tiny_rerank_model.py."
        ),
        "cases": cases,
    }


def build_with_reference(hf_dir: Path) -> dict[str, str]:
    """The trained checkpoint in ``hf_dir``; the reference scores to add beside it."""
    ref = reference(*build_checkpoint(hf_dir))
    return {"reference.json": json.dumps(ref, indent=1) + "\n"}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    export_encoder(build_with_reference, "text-classification", OUTPUT_DIR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
