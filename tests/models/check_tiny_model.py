"""Check the tiny demo model through OpenVINO GenAI: every canned reply, exactly.

Runs in the repo's runtime venv (openvino-genai 2026.4.1); ``build_tiny_model.py`` calls it
at the end of a build, and it can be run alone::

    .venv/bin/python tests/models/check_tiny_model.py [--report report.json]

The tiny code model is checked the same way with ``--model-dir tests/fixtures/tiny-coder
--gguf tests/fixtures/tiny-coder-f16.gguf --dialogues tests/models/coder_dialogues.json``.

For every dialogue in ``tests/models/dialogues.json`` the prompt is rendered with GenAI's own
``Tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=...)`` and decoded
greedily with:

* ``ir``: ``LLMPipeline`` on the IR folder, string prompt, streamed through a callback: the
  result and the joined pieces must equal the reply, and no piece may hold U+FFFD;
* ``cb``: ``ContinuousBatchingPipeline`` with prefix caching, every request in flight at once,
  prompts encoded without special tokens and passed as token ids (two rounds, so the second
  one reuses cached prefixes);
* ``gguf``: ``LLMPipeline`` on the GGUF file (GenAI builds model and tokenizer from it), token
  ids in and out. GenAI's GGUF tokenizer drops the user-defined added tokens (``<tool_call>``,
  ``<think>``...) when decoding with ``skip_special_tokens=True``, so the reply is compared with
  ``skip_special_tokens=False`` minus the control tokens; the default decode is reported.

Raw completions go through the same pipelines without a chat template, and so do code holes
(``fill_in_middle``), as the prefix-suffix-middle prompt Sidelight's worker builds for a
``suffix``. Every tokenizer must hold Qwen2.5-Coder's three FIM tokens exactly when the model
was trained on code holes (that is how the worker decides ``suffix`` is served), and none
otherwise. Held-out prompts (never trained), alone and as follow-ups after the "hello" and
"count" exchanges, are reported, not checked. The exit status is 1 if
any reply differs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import openvino as ov
import openvino_genai as ov_genai

LOG = logging.getLogger("check_tiny_model")

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_NEW_TOKENS = 128
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
KINDS = ("ir", "cb", "gguf")


def _greedy(pipe: Any) -> Any:
    # LLMPipeline has get_generation_config(); ContinuousBatchingPipeline has get_config().
    getter = getattr(pipe, "get_generation_config", None) or pipe.get_config
    config = getter()
    config.do_sample = False
    config.max_new_tokens = MAX_NEW_TOKENS
    config.apply_chat_template = False  # prompts arrive already templated (or are raw text)
    return config


def fim_prompt(prefix: str, suffix: str) -> str:
    """The prompt ``engine.worker.prepare`` builds for a ``suffix`` (Qwen2.5-Coder's PSM)."""
    fim_prefix, fim_suffix, fim_middle = FIM_TOKENS
    return f"{fim_prefix}{prefix}{fim_suffix}{suffix}{fim_middle}"


def _fim_tokens(tokenizer: Any) -> list[str]:
    """Which of the FIM tokens the tokenizer's vocabulary holds."""
    vocab = tokenizer.get_vocab()
    return [t for t in FIM_TOKENS if t.encode() in vocab or t in vocab]


def _prompts(tokenizer: Any, data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, prompt text, expected reply): dialogues (templated), completions and holes (raw)."""
    items = []
    for d in data["dialogues"]:
        prompt = tokenizer.apply_chat_template(
            d["messages"], add_generation_prompt=True, tools=d.get("tools")
        )
        items.append((d["name"], prompt, d["reply"]))
    for c in data.get("completions", []):
        items.append((c["name"], c["prompt"], c["completion"]))
    for f in data.get("fill_in_middle", []):
        items.append((f["name"], fim_prompt(f["prefix"], f["suffix"]), f["middle"]))
    return items


def _ids(tokenizer: Any, text: str) -> list[int]:
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]]


def _describe(pipe: Any, label: str) -> tuple[Any, Any]:
    tokenizer = pipe.get_tokenizer()
    config = _greedy(pipe)
    LOG.info(
        "%s: eos %d, stop ids %s; tokenizer eos %d, pad %d",
        label,
        config.eos_token_id,
        sorted(config.stop_token_ids),
        tokenizer.get_eos_token_id(),
        tokenizer.get_pad_token_id(),
    )
    return tokenizer, config


def check_ir(path: Path, data: dict[str, Any], rendered: dict[str, str] | None) -> dict[str, Any]:
    """LLMPipeline on the IR: string prompts, streamed, one at a time."""
    pipe = ov_genai.LLMPipeline(str(path), "CPU")
    tokenizer, config = _describe(pipe, "ir")
    results: dict[str, Any] = {}
    for name, prompt, expected in _prompts(tokenizer, data):
        if rendered is not None and name in rendered and rendered[name] != prompt:
            LOG.error("%s: GenAI renders the template differently from transformers", name)
        pieces: list[str] = []
        # A list in gives DecodedResults (with perf metrics); a bare str in gives a bare str.
        result = pipe.generate([prompt], config, streamer=pieces.append)
        text = result.texts[0]
        results[name] = {
            "ok": text == expected
            and "".join(pieces) == expected
            and not any("\ufffd" in p for p in pieces),
            "text": text,
            "streamed": pieces,
            "prompt_tokens": len(_ids(tokenizer, prompt)),
            "generated_tokens": result.perf_metrics.get_num_generated_tokens(),
        }
    heldout = []
    for prompt in data.get("heldout_prompts", []):
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )
        heldout.append({"prompt": prompt, "reply": pipe.generate(chat, config)})
    followups = []
    firsts = [d for d in data.get("dialogues", []) if d["name"] in ("hello", "count")]
    for first in firsts:
        history = [*first["messages"], {"role": "assistant", "content": first["reply"]}]
        for prompt in data.get("heldout_followups", []) + data.get("heldout_prompts", []):
            chat = tokenizer.apply_chat_template(
                [*history, {"role": "user", "content": prompt}], add_generation_prompt=True
            )
            followups.append(
                {"after": first["name"], "prompt": prompt, "reply": pipe.generate(chat, config)}
            )
    return {
        "dialogues": results,
        "heldout": heldout,
        "heldout_followups": followups,
        "fim_tokens": _fim_tokens(tokenizer),
    }


def check_continuous_batching(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """All prompts in flight at once, token ids in, token ids out, prefix caching on."""
    scheduler = ov_genai.SchedulerConfig()
    scheduler.enable_prefix_caching = True
    scheduler.cache_size = 1  # GB of KV cache
    scheduler.max_num_batched_tokens = 4096
    scheduler.max_num_seqs = 64
    pipe = ov_genai.ContinuousBatchingPipeline(str(path), scheduler, "CPU")
    tokenizer, config = _describe(pipe, "cb")
    items = _prompts(tokenizer, data)
    results: dict[str, Any] = {}
    for round_ in range(2):
        handles = []
        for request_id, (name, prompt, expected) in enumerate(items):
            ids = tokenizer.encode(prompt, add_special_tokens=False).input_ids
            handles.append((name, expected, pipe.add_request(request_id, ids, config)))
        while pipe.has_non_finished_requests():
            pipe.step()
        for name, expected, handle in handles:
            output = handle.read_all()[0]
            generated = [int(t) for t in output.generated_ids]
            text = tokenizer.decode(generated)
            results[name] = {
                "ok": results.get(name, {"ok": True})["ok"] and text == expected,
                "text": text,
                "generated_ids": generated,
                "finish_reason": str(output.finish_reason),
                "round": round_,
            }
    return {"dialogues": results, "fim_tokens": _fim_tokens(tokenizer)}


def check_gguf(path: Path, data: dict[str, Any], ir_dir: Path) -> dict[str, Any]:
    """LLMPipeline on the GGUF file, token ids in and out; prompts must tokenize as the IR's."""
    pipe = ov_genai.LLMPipeline(str(path), "CPU")
    tokenizer, config = _describe(pipe, "gguf")
    ir_tokenizer = ov_genai.Tokenizer(str(ir_dir))
    results: dict[str, Any] = {}
    for name, prompt, expected in _prompts(tokenizer, data):
        prompt_ids = _ids(tokenizer, prompt)
        inputs = tokenizer.encode(prompt, add_special_tokens=False)
        pieces: list[str] = []
        generated = [
            int(t) for t in pipe.generate(inputs, config, streamer=pieces.append).tokens[0]
        ]
        full = tokenizer.decode(generated, skip_special_tokens=False)
        for token in CONTROL_TOKENS:
            full = full.replace(token, "")
        default = tokenizer.decode(generated)
        results[name] = {
            "ok": full == expected,
            "text": full,
            "default_decode": default,
            "default_decode_exact": default == expected,
            "streamed": pieces,
            "same_prompt_ids_as_ir": prompt_ids == _ids(ir_tokenizer, prompt),
            "generated_ids": generated,
        }
    return {"dialogues": results, "fim_tokens": _fim_tokens(tokenizer)}


def _print_summary(report: dict[str, Any]) -> int:
    names = list(report["ir"]["dialogues"])
    failures = 0
    print(f"{'name':<14} {'ir':>3} {'cb':>3} {'gguf':>4}  tokens  gguf-default-decode")
    for name in names:
        rows = [report[kind]["dialogues"][name] for kind in KINDS]
        marks = [row["ok"] for row in rows]
        failures += marks.count(False)
        gguf = rows[2]
        note = "exact" if gguf["default_decode_exact"] else repr(gguf["default_decode"])
        if not gguf["same_prompt_ids_as_ir"]:
            note += " (prompt ids differ from the IR tokenizer's)"
        cells = " ".join(
            f"{'ok' if m else 'BAD':>{w}}" for m, w in zip(marks, (3, 3, 4), strict=True)
        )
        print(f"{name:<14} {cells}  {rows[0]['generated_tokens']:>6}  {note}")
        for kind, row in zip(KINDS, rows, strict=True):
            if not row["ok"]:
                print(f"    {kind}: {row['text']!r}")
    checks = len(names) * len(KINDS)
    expected = list(FIM_TOKENS) if report["trained_fim"] else []
    for kind in KINDS:
        found = report[kind]["fim_tokens"]
        print(f"{kind}: FIM tokens {found}" + ("" if found == expected else " BAD"))
        checks += 1
        failures += found != expected
    heldout = report["ir"]["heldout"]
    fallback = report["fallback_reply"]
    if heldout:
        hits = sum(h["reply"] == fallback for h in heldout)
        print(f"held-out prompts answered with the fallback reply: {hits}/{len(heldout)}")
    for h in heldout:
        if h["reply"] != fallback:
            print(f"    {h['prompt']!r} -> {h['reply']!r}")
    followups = report["ir"].get("heldout_followups", [])
    if followups:
        hits = sum(h["reply"] == fallback for h in followups)
        print(f"held-out follow-ups answered with the fallback reply: {hits}/{len(followups)}")
    for h in followups:
        if h["reply"] != fallback:
            print(f"    after {h['after']}: {h['prompt']!r} -> {h['reply']!r}")
    print(f"{checks - failures} passed, {failures} failed")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model-dir", type=Path, default=REPO_ROOT / "resources" / "models" / "sidelight-demo"
    )
    parser.add_argument(
        "--gguf", type=Path, default=REPO_ROOT / "tests" / "fixtures" / "sidelight-demo-f16.gguf"
    )
    parser.add_argument(
        "--dialogues", type=Path, default=REPO_ROOT / "tests" / "models" / "dialogues.json"
    )
    parser.add_argument(
        "--rendered-prompts",
        type=Path,
        help="JSON {name: prompt} rendered by transformers, to compare GenAI's rendering with",
    )
    parser.add_argument("--report", type=Path, help="write all results as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    LOG.info("openvino %s, openvino-genai %s", ov.get_version(), ov_genai.get_version())

    data = json.loads(args.dialogues.read_text(encoding="utf-8"))
    rendered = None
    if args.rendered_prompts:
        rendered = json.loads(args.rendered_prompts.read_text(encoding="utf-8"))
    report = {
        "fallback_reply": data.get("fallback_reply"),
        "trained_fim": bool(data.get("fill_in_middle")),
        "ir": check_ir(args.model_dir, data, rendered),
        "cb": check_continuous_batching(args.model_dir, data),
        "gguf": check_gguf(args.gguf, data, args.model_dir),
    }
    if args.report:
        text = json.dumps(report, ensure_ascii=False, indent=1)
        args.report.write_text(text, encoding="utf-8")
    return 1 if _print_summary(report) else 0


if __name__ == "__main__":
    sys.exit(main())
