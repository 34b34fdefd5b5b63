"""Train a wider proxy model for ``bench.quality``: a Qwen2 network on Python source.

Why: ``bench.quality`` ranks weight-compression recipes by the damage they do to a trained
network, but the models the project ships have hidden size 64, so group size 128 does not
apply and channel-wise int4 means 64-wide groups. This trains a network whose rows have 512+
weights (defaults: hidden 512, intermediate 1536, 4 layers, 8 heads, 2 KV heads, tied
embeddings) on text that exists on every machine, so int4 sym/asym, group 32/128 and
channel-wise recipes can be ranked on realistic row widths.

What: the demo model's byte-level BPE tokenizer (931 tokens, so the embedding stays small);
the ``.py`` files directly in the interpreter's standard library folder (about 4.7 MB) as
training text, except a held-out tenth chosen by a stable hash of the file name; AdamW with
a short linear warm-up and a cosine decay that ends at ``--steps`` or ``--minutes``,
whichever comes first. It writes::

    OUT/hf/            transformers checkpoint and tokenizer
    OUT/ov/            fp32 OpenVINO IR (optimum-intel, text-generation-with-past) + tokenizer
    OUT/heldout.json   the held-out texts (stdlib files, this repository's engine/ source)
                       with their sha256, so ``bench.quality --model OUT`` rebuilds the windows
    OUT/training.json  steps, tokens seen, final train loss, held-out losses, seconds, and
                       (``position_loss``) the held-out loss by token position and with the
                       context cut short, which shows whether the model uses long context

Long-context proxies (``bench.sparse_quality``): train with a long ``--seq`` (``--batch 1``);
``max_position_embeddings`` is ``--max-positions`` (default: ``--seq``, at least 1,024).
Briefly trained on plain source, a small model learns no use of context beyond a few
hundred tokens (a first 25-minute run at 8,192 tokens did not); ``--repeats N`` copies N
spans of 32-256 tokens of every training window to a later place in it (files re-read and
code quoted in edits, as in an agent's transcript), meant to teach retrieval from far
back. ``--warm-seq N`` trains the first ``--warm-share`` of the run on windows of
N tokens (as many tokens per step; the repeats scaled to the window), where attention
costs less, so more steps fit before the long windows. ``--copy-rows S`` makes that share
of the rows random tokens with one span repeated at a random distance, which only
retrieval by content (an induction head) predicts; ``--rope-theta`` sets RoPE's base
(Qwen2.5 uses 1e6, whose slowest channels barely turn over 8k tokens, so retrieval learned
on short windows could reach across long ones); ``--init-from`` goes on training another
run's checkpoint. None of these grew retrieval within this machine's 20-30-minute runs
(docs/benchmarks.md, "A proxy that retrieves from far back"); the copied-span loss the
training log prints shows when one does. ``position_loss`` then also scores ``recall``:
the last 256 tokens of each held-out window replaced by a copy of a passage a quarter into
it, with full context and with 2,048 tokens (the copy's source out of sight).
``--eval-only`` recomputes the held-out figures of an existing ``OUT/hf`` into
``training.json`` without training or exporting.

What it can and cannot show: still a small, briefly trained model on one kind of text; it has
realistic row widths but none of the outlier channels multi-billion models grow, which make
channel-wise int4 hurt more. Its figures rank recipes; they do not predict a 7B model's loss.

Threading: single-threaded script; torch uses 2 intra-op threads (the machine has 2 cores).

Run in the torch/optimum venv from the repository root (the real training is long; run it
under ``nice`` on a machine that is not benchmarking)::

    PYTHONPATH=$PWD .venv-convert/bin/python -m bench.quality_model [--minutes 120]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import math
import os
import random
import shutil
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from bench.common import add_common_args, run, setup_logging

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKENIZER_DIR = REPO_ROOT / "resources/models/sidelight-demo"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
HELDOUT_SHARE = 10  # one stdlib file in HELDOUT_SHARE is never trained on
TEXT_STDLIB = "stdlib (held out)"
TEXT_ENGINE = "engine/ (unseen)"
POSITION_EDGES = (0, 256, 1024, 2048, 4096, 8192, 16384, 32768)
ABLATION_TARGETS = 512  # the last tokens of each window, scored with their context cut short
ABLATION_CONTEXTS = (256, 1024, 2048, 4096)
RECALL_SPAN = 256  # the copied passage of the recall figures
RECALL_SKIP = 64  # its first tokens are not scored: the model cannot know yet what is copied
REPEAT_MIN, REPEAT_MAX = 32, 256  # lengths of the spans --repeats copies


def repeat_spans(seq: int, count: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """``count`` (source, destination, length) copies inside a window of ``seq`` tokens:
    the destination starts after the source ends, so the copy is always later."""
    spans = []
    for _ in range(count):
        length = rng.randint(REPEAT_MIN, min(REPEAT_MAX, seq // 4))
        source = rng.randint(0, seq - 2 * length)
        spans.append((source, rng.randint(source + length, seq - length), length))
    return spans


def is_copy_row(n: int, share: float) -> bool:
    """Whether training row ``n`` (counted over the whole run) is a ``--copy-rows`` row:
    spread evenly, so ``share`` of any run of rows are, even at one row a step."""
    return math.floor((n + 1) * share) > math.floor(n * share)


def copy_row(seq: int, ordinary: Any, generator: Any, rng: random.Random) -> tuple[Any, int, int]:
    """A ``--copy-rows`` row: ``seq`` random ordinary tokens, one span of ``seq / 8`` to
    ``seq / 2`` of them repeated later at a random distance; returns the row, where the
    repeat starts and its length. Only retrieval predicts the repeat, and only by content
    (a fixed distance taught a network to copy from that distance and no other): the
    repeated-random-tokens probe on which induction heads are studied."""
    import torch  # venv only

    row = ordinary[torch.randint(0, len(ordinary), (seq,), generator=generator)]
    length = rng.randint(seq // 8, seq // 2)
    source = rng.randint(0, seq - 2 * length)
    dest = rng.randint(source + length, seq - length)
    row[dest : dest + length] = row[source : source + length].clone()
    return row, dest, length


def recall_window(ids: list[int]) -> list[int]:
    """``ids`` with its last ``RECALL_SPAN`` tokens replaced by the passage a quarter in."""
    n = len(ids)
    source = n // 4
    return ids[: n - RECALL_SPAN] + ids[source : source + RECALL_SPAN]


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(name: str) -> bool:
    """Stable split: the first byte of the name's sha256 decides (no PYTHONHASHSEED)."""
    return hashlib.sha256(name.encode()).digest()[0] % HELDOUT_SHARE == 0


def stdlib_split() -> tuple[list[Path], list[Path]]:
    """(training files, held-out files): the ``.py`` files directly in the stdlib folder."""
    files = sorted(stdlib_dir().glob("*.py"))
    return [f for f in files if not is_heldout(f.name)], [f for f in files if is_heldout(f.name)]


def engine_files() -> list[Path]:
    return sorted((REPO_ROOT / "engine").rglob("*.py"))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def heldout_manifest(heldout: list[Path]) -> dict[str, Any]:
    """The held-out texts as ``bench.quality`` reads them: roots are resolved at load time
    (``stdlib``: this interpreter's stdlib folder; ``repo``: the repository root)."""
    return {
        "stdlib_path": str(stdlib_dir()),
        "texts": [
            {
                "name": TEXT_STDLIB,
                "root": "stdlib",
                "files": [{"path": f.name, "sha256": sha256_of(f)} for f in heldout],
            },
            {
                "name": TEXT_ENGINE,
                "root": "repo",
                "files": [
                    {"path": f.relative_to(REPO_ROOT).as_posix(), "sha256": sha256_of(f)}
                    for f in engine_files()
                ],
            },
        ],
    }


def tokenize_files(tokenizer: Any, files: list[Path], separator: int) -> list[int]:
    """One token stream: every file's tokens followed by ``separator`` (<|endoftext|>)."""
    stream: list[int] = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        stream.append(separator)
    return stream


def lr_at(progress: float, step: int, warmup: int, peak: float) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from ``peak`` to ``peak / 10``.

    ``progress`` (0..1) is the larger of the step share and the wall-time share, so the
    decay finishes whichever limit stops the run.
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def flops_per_step(hidden: int, intermediate: int, layers: int, kv_heads: int, heads: int,
                   vocab: int, seq: int, batch: int) -> float:  # fmt: skip
    """Training FLOPs of one step (6 x parameters x tokens + attention), for time estimates."""
    head_dim = hidden // heads
    attn = hidden * hidden * 2 + 2 * hidden * kv_heads * head_dim
    params = layers * (attn + 3 * hidden * intermediate) + vocab * hidden
    tokens = seq * batch
    return 6.0 * params * tokens + 6.0 * layers * 2 * seq * hidden * tokens


def window_starts(length: int, seq: int, limit: int) -> list[int]:
    """Up to ``limit`` evenly spaced starts of non-overlapping ``seq`` windows in ``length``."""
    starts = list(range(0, length - seq, seq))
    step = max(1, len(starts) // max(1, limit))
    return starts[::step][:limit]


def evaluate(model: Any, stream: list[int], seq: int, limit: int) -> float:
    """Mean next-token loss over up to ``limit`` evenly spaced non-overlapping windows."""
    import torch  # type: ignore[import-not-found]  # venv only

    starts = window_starts(len(stream), seq, limit)
    if not starts:
        return float("nan")
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(starts), 8):
            batch = torch.tensor([stream[s : s + seq] for s in starts[i : i + 8]])
            out = model(input_ids=batch, labels=batch)  # the model shifts the labels
            total += float(out.loss) * len(batch)
    model.train()
    return total / len(starts)


def token_losses(model: Any, ids: list[int]) -> Any:
    """Next-token losses of one window (torch tensor ``[len(ids) - 1]``): entry ``i`` is
    the loss of token ``i + 1``, predicted from the ``i + 1`` tokens before it."""
    import torch  # venv only

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
        return torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none")


def position_losses(model: Any, stream: list[int], seq: int, limit: int) -> dict[str, float]:
    """Held-out loss by token position, and of late tokens with their context cut short.

    Why: a model that uses long context predicts late tokens better than early ones (code
    reuses names defined far above), but position alone mixes "some context" with "long
    context". The cut-context figures separate them: the last ``ABLATION_TARGETS`` tokens
    of each window are scored again from only the ``W`` tokens before the first of them
    (``ctx W``; RoPE is relative, so only the lost tokens differ); ``ctx full`` minus
    ``ctx 2048`` is what context beyond 2k tokens is worth to the model, which is what
    tri-shape sparse prefill (128 start + 1,920 recent tokens) hides from prompt tokens.
    Keys: ``pos A-B`` (target positions A..B-1, mean nats) and ``ctx W`` / ``ctx full``.
    """
    import torch  # venv only

    starts = window_starts(len(stream), seq, limit)
    if not starts:
        return {}
    model.eval()
    full = torch.stack([token_losses(model, stream[s : s + seq]) for s in starts])
    out: dict[str, float] = {}
    for a, b in itertools.pairwise(POSITION_EDGES):
        if b <= seq:
            out[f"pos {a}-{b}"] = float(full[:, max(a, 1) - 1 : b - 1].mean())
    n = ABLATION_TARGETS
    if seq > 2 * n:
        out["ctx full"] = float(full[:, seq - n - 1 :].mean())
        for w in ABLATION_CONTEXTS:
            if w + n < seq:
                cut = [
                    token_losses(model, stream[s + seq - n - w : s + seq])[w - 1 :] for s in starts
                ]
                out[f"ctx {w}"] = float(torch.stack(cut).mean())
    if seq // 4 + RECALL_SPAN <= seq - RECALL_SPAN - 2048:  # source out of a 2,048 view
        scored = RECALL_SPAN - RECALL_SKIP
        recall = [recall_window(stream[s : s + seq]) for s in starts]
        out["recall full"] = float(
            torch.stack([token_losses(model, w)[-scored:] for w in recall]).mean()
        )
        out["recall ctx 2048"] = float(
            torch.stack(
                [token_losses(model, w[-2048 - RECALL_SPAN :])[-scored:] for w in recall]
            ).mean()
        )
    model.train()
    logger.info("position losses (%d windows of %d): %s", len(starts), seq, out)
    return out


def token_streams(
    tokenizer: Any,
) -> tuple[list[int], dict[str, list[int]], list[Path], list[Path]]:
    """(training stream, held-out streams by text name, training files, held-out files)."""
    separator = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    train_files, heldout = stdlib_split()
    t0 = time.monotonic()
    stream = tokenize_files(tokenizer, train_files, separator)
    held = held_texts(tokenizer, heldout, separator)
    logger.info(
        "tokenized in %.0f s: %d training files (%d tokens), %d held-out stdlib files "
        "(%d tokens), engine/ %d tokens",
        time.monotonic() - t0, len(train_files), len(stream), len(heldout),
        len(held[TEXT_STDLIB]), len(held[TEXT_ENGINE]),
    )  # fmt: skip
    return stream, held, train_files, heldout


def held_texts(tokenizer: Any, heldout: list[Path], separator: int) -> dict[str, list[int]]:
    """The held-out token streams by text name: the stdlib's held-out files, ``engine/``."""
    return {
        TEXT_STDLIB: tokenize_files(tokenizer, heldout, separator),
        TEXT_ENGINE: tokenize_files(tokenizer, engine_files(), separator),
    }


def train(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Train and save OUT/hf; return the training record."""
    import torch  # venv only
    from transformers import (  # type: ignore[import-not-found]  # venv only
        AutoModelForCausalLM,
        AutoTokenizer,
        Qwen2Config,
    )

    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    max_length = tokenizer.model_max_length
    tokenizer.model_max_length = sys.maxsize  # whole files; the model sees --seq windows
    stream, held, train_files, heldout = token_streams(tokenizer)
    tokenizer.model_max_length = max_length
    (out / "heldout.json").write_text(json.dumps(heldout_manifest(heldout), indent=1))
    separator = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.max_positions or max(1024, args.seq),
        tie_word_embeddings=True,
        bos_token_id=separator,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=separator,
        rope_theta=args.rope_theta,
    )
    if args.init_from:  # go on training a proxy: its shape and RoPE, not the arguments'
        model = AutoModelForCausalLM.from_pretrained(args.init_from, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    shape = model.config  # --init-from's own, else the arguments'
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("model: %.1f M parameters, %s", n_params / 1e6, shape.to_diff_dict())
    special = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
    record = train_loop(args, model, torch.tensor(stream, dtype=torch.long), ordinary)
    record.update(heldout_figures(model, held, args))
    record.update(
        parameters=n_params,
        args={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        training_files=len(train_files),
        flops_per_step=flops_per_step(
            shape.hidden_size,
            shape.intermediate_size,
            shape.num_hidden_layers,
            shape.num_key_value_heads,
            shape.num_attention_heads,
            len(tokenizer),
            args.seq,
            args.batch,
        ),
        training_tokens=len(stream),
        torch=torch.__version__,
    )
    hf = out / "hf"
    shutil.rmtree(hf, ignore_errors=True)
    model.save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    return record


def heldout_figures(
    model: Any, held: dict[str, list[int]], args: argparse.Namespace
) -> dict[str, Any]:
    """``heldout_loss`` (mean over ``--seq`` windows) and ``position_loss`` per held-out text."""
    figures: dict[str, Any] = {
        "heldout_loss": {
            name: evaluate(model, ids, args.seq, args.eval_windows) for name, ids in held.items()
        },
        "position_loss": {
            name: position_losses(model, ids, args.seq, args.eval_windows)
            for name, ids in held.items()
        },
    }
    logger.info("held-out loss: %s", figures["heldout_loss"])
    return figures


def evaluate_only(args: argparse.Namespace, out: Path) -> None:
    """Recompute the held-out figures of ``OUT/hf`` into ``OUT/training.json``."""
    import torch  # venv only
    from transformers import AutoModelForCausalLM, AutoTokenizer  # venv only

    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(out / "hf")
    tokenizer.model_max_length = sys.maxsize
    separator = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    _, heldout = stdlib_split()
    held = held_texts(tokenizer, heldout, separator)
    model = AutoModelForCausalLM.from_pretrained(out / "hf", dtype=torch.float32)
    path = out / "training.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    record.update(heldout_figures(model, held, args))
    path.write_text(json.dumps(record, indent=1))


def make_batch(
    args: argparse.Namespace,
    data: Any,
    ordinary: Any,
    shape: tuple[int, int, int, int],
    rng: random.Random,
    generator: Any,
) -> tuple[Any, dict[int, tuple[int, int]]]:
    """One step's rows: ``shape`` is (seq, rows, repeats, rows seen so far). Code windows
    of ``data`` with ``repeats`` copied spans, and the ``--copy-rows`` share replaced by
    :func:`copy_row` s; returns the batch and, per copy row, where its repeat starts and
    its length."""
    import torch  # venv only

    seq, rows, repeats, rows_seen = shape
    offsets = torch.randint(0, len(data) - seq, (rows,), generator=generator)
    batch = torch.stack([data[o : o + seq] for o in offsets.tolist()])
    for row in batch:
        for source, dest, length in repeat_spans(seq, repeats, rng):
            row[dest : dest + length] = row[source : source + length].clone()
    spans: dict[int, tuple[int, int]] = {}
    for i in range(rows):
        if is_copy_row(rows_seen + i, args.copy_rows):
            batch[i], dest, length = copy_row(seq, ordinary, generator, rng)
            spans[i] = (dest, length)
    return batch, spans


def train_loop(args: argparse.Namespace, model: Any, data: Any, ordinary: Any) -> dict[str, Any]:
    """AdamW on random ``--seq`` windows of ``data`` until ``--steps`` or ``--minutes``;
    ``--copy-rows`` of the rows are :func:`copy_row` s of the ``ordinary`` token ids."""
    import torch  # venv only

    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1
    )
    generator = torch.Generator().manual_seed(args.seed)
    rng = random.Random(args.seed)
    warmup = max(1, min(100, args.steps // 20))
    limit_s = args.minutes * 60 if args.minutes else math.inf
    losses: list[float] = []
    tokens_seen = 0
    step = 0
    stopped_by = "steps"
    warm_steps = 0
    rows_seen = 0
    copy_losses: list[float] = []  # the copy rows' repeated spans
    start = time.monotonic()
    model.train()
    while step < args.steps:
        elapsed = time.monotonic() - start
        if elapsed >= limit_s:
            stopped_by = "minutes"
            break
        progress = max(step / args.steps, elapsed / limit_s)
        lr = lr_at(progress, step, warmup, args.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        seq, rows, repeats = args.seq, args.batch, args.repeats
        if args.warm_seq and progress < args.warm_share:  # same tokens per step, shorter rows
            seq, rows = args.warm_seq, args.batch * args.seq // args.warm_seq
            repeats = round(args.repeats * args.warm_seq / args.seq)
            warm_steps += 1
        batch, spans = make_batch(
            args, data, ordinary, (seq, rows, repeats, rows_seen), rng, generator
        )
        rows_seen += rows
        logits = model(input_ids=batch).logits[:, :-1]
        token_loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none"
        ).view(rows, seq - 1)
        loss = token_loss.mean()
        if spans:  # the repeats' tokens after their first: token d + 1 is predicted at d
            copied = [token_loss[i, d : d + n - 1] for i, (d, n) in spans.items()]
            copy_losses.append(float(torch.cat(copied).detach().mean()))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        tokens_seen += rows * seq
        losses.append(loss.detach().item())
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            logger.info(
                "step %d/%d seq %d loss %.4f copied spans %.3f lr %.2e tokens %d "
                "(%.2f epochs) %.2f s/step",
                step, args.steps, seq, losses[-1], copy_losses[-1] if copy_losses else math.nan,
                lr, tokens_seen, tokens_seen / len(data), (time.monotonic() - start) / step,
            )  # fmt: skip
    seconds = time.monotonic() - start
    return {
        "steps": step,
        "warm_steps": warm_steps,
        "stopped_by": stopped_by,
        "tokens_seen": tokens_seen,
        "epochs": tokens_seen / len(data),
        "final_train_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
        "final_copy_loss": sum(copy_losses[-20:]) / len(copy_losses[-20:]) if copy_losses else None,
        "seconds": seconds,
        "seconds_per_step": seconds / max(1, step),
    }


def export(venv_python: Path, out: Path) -> None:
    """OUT/hf -> OUT/ov: fp32 IR through optimum-cli, plus the demo tokenizer's files."""
    tmp = out / "ov.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    optimum = venv_python.with_name("optimum-cli")
    run(
        [optimum, "export", "openvino", "--model", out / "hf", "--task",
         "text-generation-with-past", "--weight-format", "fp32", tmp],
        env=env,
    )  # fmt: skip
    for name in TOKENIZER_FILES:
        shutil.copy2(TOKENIZER_DIR / name, tmp / name)
    shutil.rmtree(out / "ov", ignore_errors=True)
    tmp.rename(out / "ov")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2000, help="at most this many steps")
    parser.add_argument("--minutes", type=float, default=0.0, help="and at most this wall time")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=10, help="log the loss every N steps")
    parser.add_argument("--eval-windows", type=int, default=32, help="held-out loss windows")
    parser.add_argument(
        "--repeats",
        type=int,
        default=0,
        help="copy this many spans of each training window later into it (long-range recall)",
    )
    parser.add_argument(
        "--warm-seq",
        type=int,
        default=0,
        help="train on windows this long (--batch x --seq / N of them) for --warm-share first",
    )
    parser.add_argument("--warm-share", type=float, default=0.7)
    parser.add_argument(
        "--copy-rows",
        type=float,
        default=0.0,
        help="this share of the rows: random tokens with one span repeated (retrieval)",
    )
    parser.add_argument(
        "--max-positions", type=int, default=0, help="default: --seq, at least 1024"
    )
    parser.add_argument(
        "--rope-theta",
        type=float,
        default=10000.0,
        help="RoPE base (Qwen2.5 uses 1e6, which lets retrieval learned on short windows "
        "reach far: its slowest channels barely turn over 8k tokens)",
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        help="start from this transformers checkpoint (another run's OUT/hf), not at random",
    )
    parser.add_argument("--out", type=Path, help="default: CACHE/quality/code-<hidden>")
    parser.add_argument(
        "--eval-only",
        action="store_true",
        help="recompute OUT/hf's held-out figures (at --seq) into training.json; no training",
    )
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    out: Path = args.out or args.cache / "quality" / f"code-{args.hidden}"
    out.mkdir(parents=True, exist_ok=True)
    logger.info("writing %s", out)
    if args.eval_only:
        evaluate_only(args, out)
        return 0
    record = train(args, out)
    export(Path(sys.executable), out)
    (out / "training.json").write_text(json.dumps(record, indent=1))
    logger.info("done: %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
