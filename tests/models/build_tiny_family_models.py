"""Build one tiny chat model per tool-calling family: the issue 22 end-to-end fixtures.

What it builds
--------------
For each family (gpt-oss harmony, Qwen3-Coder XML, DeepSeek R1, Gemma 4, Kimi K2 Thinking,
GLM-4.6, Qwen3.5 XML with ``<think>``, Ministral 3 Reasoning ``[THINK]`` / ``[TOOL_CALLS]``,
NVIDIA Nemotron Nano v2 ``<TOOLCALL>[...]``, IBM Granite 3.3 ``<|tool_call|>[...]``, DeepSeek
V3.2 ``<｜DSML｜function_calls>``, ByteDance Seed-OSS ``<seed:think>`` / ``<seed:tool_call>``,
MiniMax-M2 ``<think>`` / ``<minimax:tool_call><invoke name=...>``) a
Qwen2-architecture causal LM (hidden 64, one layer, tied embeddings) with the
recipe of ``tests/models/build_tiny_model.py`` (whose functions it imports): a small byte-level BPE
vocabulary inside the real Qwen2 tokenizer pipeline, trained on this family's rendered
dialogues only, plus the family's own markup tokens added the way the family's real tokenizer
has them (control tokens as ``special``, the rest as plain added tokens), and the family's
**real** chat template from llama.cpp's ``models/templates/``. Its end-of-generation ids go
in ``generation_config.json`` as the real model lists them (gpt-oss: ``<|return|>``,
``<|endoftext|>``, ``<|call|>``; Gemma 4: ``<eos>``, ``<turn|>``, ``<|tool_response>``).

Each model is trained, seeded, until greedy decoding reproduces every reply exactly (with a
logit margin) on three dialogues, :data:`FAMILIES` below:

* ``tool``: "What is the weather in Paris?" with a ``get_weather`` tool -> reasoning first
  (where the family reasons) and a call ``get_weather({"city": "Paris"})`` in native markup;
* ``tool-result``: the same turn followed by the call and its result ``"22°C sunny"`` ->
  reasoning and the final answer "It is 22°C and sunny in Paris.";
* ``plain``: "What is the capital of France?" -> reasoning and "The capital of France is Paris."

Which prompts: each dialogue is rendered by transformers' ``apply_chat_template`` (the way a
hub model is rendered) *and* by OpenVINO GenAI, the renderer Sidelight's worker uses
(:func:`genai_renderings`, in the runtime venv), and the model is trained on both where they
differ: GenAI writes the tools into a system prompt for a template that ignores them
(DeepSeek R1's), and transformers' sandbox refuses Kimi K2 Thinking's template once a call is
in the history (``list.append``), which GenAI renders. Tool messages that name their function
(as the Ollama route sends them) are rendered too: Kimi writes the name as the role; for
GLM-4.6 so is the tool in the ``ollama`` client's key order (its tiny model answers the other
order differently). GLM-4.6 is the family whose template the issue saw GenAI refuse; where
GenAI refuses, the worker's own Jinja renderer stands in, here as in Sidelight; so it does
where GenAI writes a call history as JSON that the template writes in its own markup
(Ministral 3's ``[TOOL_CALLS]name[ARGS]``: ``engine.worker.jinja_template.render_prompt``).
Qwen3.5, Ministral 3, Nemotron Nano v2, Granite 3.3, DeepSeek V3.2, Seed-OSS and MiniMax-M2
are also trained on the ``ollama`` client's key order of the tool and on the London-only tool
of ``tests/server/test_family_grammars_e2e.py`` (reply unchanged), so that their tiny models
open the call there and the lazy grammar is what picks the city. DeepSeek V3.2, Seed-OSS and
MiniMax-M2 are also trained to finish a call that a forced ``tool_choice`` opens after the
plain question (``Family.forced_calls``: the prompt runs on into the call up to its value),
under the Anthropic grammar test's tool description too: without it their tiny models, pushed
into a call they were never trained to write there, wrote a wrong closing tag inside the
free-text value and ran on to ``max_tokens``. MiniMax-M2's template is the other
one GenAI refuses once tools are sent (``tojson(ensure_ascii=False)``): the worker's Jinja
renderer renders it, here as in Sidelight. DeepSeek V3.2's DSML markup is plain text in its
real vocabulary (no added token), so its tiny model writes it byte by byte.
Families whose template switches thinking on and off (``enable_thinking``: DeepSeek R1,
Gemma 4, DeepSeek V3.2) are trained on the prompts rendered with thinking on, which is what a client asking
for thinking gets. gpt-oss's template writes today's date into its system message, so its
dialogues are rendered over several seeded dates (the replies do not depend on the date).

Outputs (rebuilt from scratch on every run): ``tests/fixtures/family-<name>/`` (OpenVINO IR,
fp32, with the converted tokenizer and detokenizer, ``config.json``, ``generation_config.json``,
``tokenizer.json``, ``tokenizer_config.json`` with the chat template inline) and
``tests/fixtures/family-<name>/dialogues.json`` (the messages, tools and replies the tests in
``tests/server/test_families_e2e.py`` send and expect). Each folder is about 0.5 MB. The
templates inside are copied unchanged from llama.cpp's ``models/templates/`` (see
``tests/fixtures/templates/README.md`` for where they come from and their licence).

How to rerun
------------
With the build venv of ``build_tiny_model.py`` (its docstring says how to create it) and the
runtime venv (``.venv`` at the repository root; ``SIDELIGHT_RUNTIME_PYTHON`` names another
interpreter, e.g. ``/work/main/.venv/bin/python`` from a git worktree)::

    /work/venv-build/bin/python tests/models/build_tiny_family_models.py [--family NAME ...]

then ``pytest tests/server/test_families_e2e.py`` in the runtime venv. About two minutes a
family here. The llama-cpp-python sdist is fetched (once) into ``~/.cache/sidelight-build`` by
``build_tiny_model.fetch_llama_cpp``; the templates are read from that tarball. The work
folder is ``~/.cache/sidelight-build/work-families``. Determinism is as in
``build_tiny_model.py``: seeded, deterministic torch on one thread (a rebuild here gives the
same files).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.models import build_tiny_model as base

LOG = logging.getLogger("build_tiny_family_models")

FIXTURES = base.REPO_ROOT / "tests" / "fixtures"
WORK_DIR = base.CACHE_DIR / "work-families"
# The runtime venv (openvino-genai) that renders prompts the way Sidelight's worker does.
RUNTIME_PYTHON = Path(os.environ.get("SIDELIGHT_RUNTIME_PYTHON", base.RUNTIME_PYTHON))
SEED = 20261202
BPE_VOCAB_SIZE = 700
SHAPE: dict[str, Any] = {**base.MODEL_SHAPE, "num_hidden_layers": 1, "intermediate_size": 128}

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name."}},
            "required": ["city"],
        },
    },
}
ASK_WEATHER = "What is the weather in Paris?"
ASK_CAPITAL = "What is the capital of France?"
TOOL_RESULT = "22°C sunny"
FINAL_ANSWER = "It is 22°C and sunny in Paris."
CAPITAL_ANSWER = "The capital of France is Paris."
REASON_TOOL = "The user wants the weather in Paris. I will call get_weather."
REASON_RESULT = "The tool says 22°C and sunny."
REASON_CAPITAL = "The capital of France is Paris."


@dataclass(frozen=True)
class Family:
    """One family: its template, its tokens as its real tokenizer has them, its replies."""

    name: str
    template: str  # file name under models/templates/ in the sdist
    special: tuple[str, ...]  # added tokens with special=True (control tokens)
    plain: tuple[str, ...]  # added tokens with special=False (decoded like text)
    eos: tuple[str, ...]  # generation_config.json eos_token_id, in the real model's order
    eos_token: str  # tokenizer_config.json eos_token
    pad_token: str
    bos_token: str | None
    replies: dict[str, str]  # dialogue name -> raw reply text, end token included
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning: bool = True
    dates: int = 0  # render over this many seeded dates (templates that print today's date)
    # How the template prints the date (a regex) and how to write one (a format of a date).
    date_re: str = r"Current date: \d{4}-\d{2}-\d{2}"
    date_text: str = "Current date: {:%Y-%m-%d}"
    ollama_tools: bool = False  # train on the ollama client's key order of the tool too
    # Train the call on the London-only tool too (what the lazy-grammar test offers), so the
    # tiny model opens its call there and the grammar, not the training, picks the city.
    london_tool: bool = False
    # Train the tool-result turn with the Anthropic route's ids too (``toolu_0``): GenAI writes
    # the call history of a template that drops it (Granite 3.3's) as JSON, ids and all.
    anthropic_ids: bool = False
    # Also train it to finish a call opened after the plain question's reasoning: the prompt
    # ends where a forced ``tool_choice``'s grammar leaves the model (the call written up to
    # the city), the target is the rest of the trained call. Its reply to the plain question
    # is unchanged (text), but pushed into a call by the grammar, the tiny model closes it
    # instead of running on inside the free-text value. Trained with the Anthropic tests'
    # tool description too (``ANTHROPIC_DESCRIPTION``), which the plain reply also answers.
    forced_calls: bool = False
    reasoning_end: str = "</think>"  # where the reasoning ends in a reply (forced_calls)


def _harmony(channel: str, body: str, end: str) -> str:
    return f"<|channel|>{channel}<|message|>{body}{end}"


_GPT_OSS = Family(
    name="gpt-oss",
    template="openai-gpt-oss-120b.jinja",
    # o200k_harmony: every harmony marker is a special token.
    special=(
        "<|startoftext|>",
        "<|endoftext|>",
        "<|return|>",
        "<|constrain|>",
        "<|channel|>",
        "<|start|>",
        "<|end|>",
        "<|message|>",
        "<|call|>",
    ),
    plain=(),
    eos=("<|return|>", "<|endoftext|>", "<|call|>"),
    eos_token="<|return|>",
    pad_token="<|endoftext|>",
    bos_token="<|startoftext|>",
    replies={
        "tool": _harmony("analysis", REASON_TOOL, "<|end|>")
        + "<|start|>assistant<|channel|>commentary to=functions.get_weather"
        + ' <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
        "tool-result": _harmony("analysis", REASON_RESULT, "<|end|>")
        + "<|start|>assistant"
        + _harmony("final", FINAL_ANSWER, "<|return|>"),
        "plain": _harmony("analysis", REASON_CAPITAL, "<|end|>")
        + "<|start|>assistant"
        + _harmony("final", CAPITAL_ANSWER, "<|return|>"),
    },
    dates=4,
)

_QWEN3_CODER = Family(
    name="qwen3-coder",
    template="Qwen3-Coder.jinja",
    special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    plain=("<tool_call>", "</tool_call>", "<think>", "</think>"),
    eos=("<|im_end|>", "<|endoftext|>"),
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    bos_token=None,
    replies={
        "tool": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call><|im_end|>",
        "tool-result": FINAL_ANSWER + "<|im_end|>",
        "plain": CAPITAL_ANSWER + "<|im_end|>",
    },
    reasoning=False,
)

_DS_CALL = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
_DEEPSEEK_R1 = Family(
    name="deepseek-r1",
    template="deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    special=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    plain=(
        "<｜User｜>",
        "<｜Assistant｜>",
        "<think>",
        "</think>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁outputs▁begin｜>",
        "<｜tool▁outputs▁end｜>",
        "<｜tool▁output▁begin｜>",
        "<｜tool▁output▁end｜>",
        "<｜tool▁sep｜>",
    ),
    eos=("<｜end▁of▁sentence｜>",),
    eos_token="<｜end▁of▁sentence｜>",
    pad_token="<｜end▁of▁sentence｜>",
    bos_token="<｜begin▁of▁sentence｜>",
    # The generation prompt opens the block (``<｜Assistant｜><think>\n``).
    replies={
        "tool": f"{REASON_TOOL}\n</think>\n\n{_DS_CALL}<｜end▁of▁sentence｜>",
        # After a tool's output the template writes no generation prompt: a fresh block.
        "tool-result": f"<think>\n{REASON_RESULT}\n</think>\n\n{FINAL_ANSWER}<｜end▁of▁sentence｜>",
        "plain": f"{REASON_CAPITAL}\n</think>\n\n{CAPITAL_ANSWER}<｜end▁of▁sentence｜>",
    },
    template_kwargs={"enable_thinking": True},
)

_GEMMA4 = Family(
    name="gemma4",
    template="google-gemma-4-31B-it.jinja",
    # ggml-vocab-gemma-4.gguf: control tokens (special) and user-defined ones (plain).
    special=("<pad>", "<eos>", "<bos>", "<|tool>", "<tool|>", "<|think|>", "<|turn>", "<turn|>"),
    plain=(
        "<|tool_call>",
        "<tool_call|>",
        "<|tool_response>",
        "<tool_response|>",
        '<|"|>',
        "<|channel>",
        "<channel|>",
    ),
    eos=("<eos>", "<turn|>", "<|tool_response>"),
    eos_token="<eos>",
    pad_token="<pad>",
    bos_token="<bos>",
    replies={
        "tool": f"<|channel>thought\n{REASON_TOOL}<channel|>"
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|><|tool_response>',
        "tool-result": f"<|channel>thought\n{REASON_RESULT}<channel|>{FINAL_ANSWER}<turn|>",
        "plain": f"<|channel>thought\n{REASON_CAPITAL}<channel|>{CAPITAL_ANSWER}<turn|>",
    },
    template_kwargs={"enable_thinking": True},
)

_KIMI_CALL = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
)
_KIMI_K2 = Family(
    name="kimi-k2",
    template="Kimi-K2-Thinking.jinja",
    # Kimi's tokenizer_config.json: its <|...|> markers are special tokens; <think> is not.
    special=(
        "[BOS]",
        "[EOS]",
        "<|im_end|>",
        "<|im_user|>",
        "<|im_assistant|>",
        "<|im_system|>",
        "<|im_middle|>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
    ),
    plain=("<think>", "</think>"),
    eos=("<|im_end|>",),
    eos_token="<|im_end|>",
    pad_token="[EOS]",
    bos_token="[BOS]",
    replies={
        "tool": f"<think>{REASON_TOOL}</think>{_KIMI_CALL}<|im_end|>",
        "tool-result": f"<think>{REASON_RESULT}</think>{FINAL_ANSWER}<|im_end|>",
        "plain": f"<think>{REASON_CAPITAL}</think>{CAPITAL_ANSWER}<|im_end|>",
    },
)

_GLM_CALL = (
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
)
_GLM46 = Family(
    name="glm-4.6",
    template="GLM-4.6.jinja",
    special=(
        "<|endoftext|>",
        "[gMASK]",
        "<sop>",
        "<|system|>",
        "<|user|>",
        "<|assistant|>",
        "<|observation|>",
    ),
    plain=(
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "<tool_response>",
        "</tool_response>",
    ),
    eos=("<|endoftext|>", "<|user|>", "<|observation|>"),
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    bos_token=None,
    ollama_tools=True,  # the tiny model answers differently on the other key order
    replies={
        "tool": f"\n<think>{REASON_TOOL}</think>\n{_GLM_CALL}<|observation|>",
        "tool-result": f"\n<think>{REASON_RESULT}</think>\n{FINAL_ANSWER}<|user|>",
        "plain": f"\n<think>{REASON_CAPITAL}</think>\n{CAPITAL_ANSWER}<|user|>",
    },
)

_QWEN35_CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "</function>\n</tool_call>"
)
_QWEN35 = Family(
    name="qwen3.5",
    template="Qwen3.5-4B.jinja",
    special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    plain=(
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
        "<tool_response>",
        "</tool_response>",
    ),
    eos=("<|im_end|>", "<|endoftext|>"),
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    bos_token=None,
    # The generation prompt opens the block (``<|im_start|>assistant\n<think>\n``).
    ollama_tools=True,  # the tiny model answers differently on the other key order
    london_tool=True,
    replies={
        "tool": f"{REASON_TOOL}\n</think>\n\n{_QWEN35_CALL}<|im_end|>",
        "tool-result": f"{REASON_RESULT}\n</think>\n\n{FINAL_ANSWER}<|im_end|>",
        "plain": f"{REASON_CAPITAL}\n</think>\n\n{CAPITAL_ANSWER}<|im_end|>",
    },
)

_MINISTRAL3 = Family(
    name="ministral-3",
    template="mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    # Tekken: every control token is special, [THINK] and [ARGS] too.
    special=(
        "<unk>",
        "<s>",
        "</s>",
        "<pad>",
        "[INST]",
        "[/INST]",
        "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]",
        "[TOOL_RESULTS]",
        "[/TOOL_RESULTS]",
        "[TOOL_CALLS]",
        "[SYSTEM_PROMPT]",
        "[/SYSTEM_PROMPT]",
        "[ARGS]",
        "[CALL_ID]",
        "[THINK]",
        "[/THINK]",
    ),
    plain=(),
    eos=("</s>",),
    eos_token="</s>",
    pad_token="<pad>",
    bos_token="<s>",
    ollama_tools=True,  # the tiny model answers differently on the other key order
    london_tool=True,
    replies={
        "tool": f'[THINK]{REASON_TOOL}[/THINK][TOOL_CALLS]get_weather[ARGS]{{"city": "Paris"}}</s>',
        "tool-result": f"[THINK]{REASON_RESULT}[/THINK]{FINAL_ANSWER}</s>",
        "plain": f"[THINK]{REASON_CAPITAL}[/THINK]{CAPITAL_ANSWER}</s>",
    },
)

_NEMOTRON = Family(
    name="nemotron-nano-v2",
    template="NVIDIA-Nemotron-Nano-v2.jinja",
    # Nemotron-H's vocabulary: the turn markers are control tokens; the tags decode as text.
    special=("<unk>", "<s>", "</s>", "<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>"),
    plain=(
        "<think>",
        "</think>",
        "<TOOLCALL>",
        "</TOOLCALL>",
        "<TOOL_RESPONSE>",
        "</TOOL_RESPONSE>",
    ),
    eos=("<SPECIAL_12>", "</s>"),
    eos_token="<SPECIAL_12>",
    pad_token="</s>",
    bos_token="<s>",
    ollama_tools=True,
    london_tool=True,
    # The generation prompt opens the block (``<SPECIAL_11>Assistant\n<think>\n``).
    replies={
        "tool": f"{REASON_TOOL}\n</think>\n\n"
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>'
        "<SPECIAL_12>",
        "tool-result": f"{REASON_RESULT}\n</think>\n\n{FINAL_ANSWER}<SPECIAL_12>",
        "plain": f"{REASON_CAPITAL}\n</think>\n\n{CAPITAL_ANSWER}<SPECIAL_12>",
    },
)

_GRANITE33 = Family(
    name="granite-3.3",
    template="ibm-granite-granite-3.3-2B-Instruct.jinja",
    special=("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"),
    plain=(),
    eos=("<|end_of_text|>",),
    eos_token="<|end_of_text|>",
    pad_token="<|end_of_text|>",
    bos_token="<|end_of_text|>",
    reasoning=False,  # its thinking mode is a system-prompt switch (``thinking``), off here
    dates=4,  # "Today's Date: December 02, 2026." (strftime_now)
    date_re=r"Today's Date: [A-Z][a-z]+ \d{2}, \d{4}",
    date_text="Today's Date: {:%B %d, %Y}",
    ollama_tools=True,
    london_tool=True,
    anthropic_ids=True,
    replies={
        "tool": '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
        "<|end_of_text|>",
        "tool-result": f"{FINAL_ANSWER}<|end_of_text|>",
        "plain": f"{CAPITAL_ANSWER}<|end_of_text|>",
    },
)

_DSML = "｜DSML｜"
_DSML_CALL = (
    f"<{_DSML}function_calls>\n"
    f'<{_DSML}invoke name="get_weather">\n'
    f'<{_DSML}parameter name="city" string="true">Paris</{_DSML}parameter>\n'
    f"</{_DSML}invoke>\n"
    f"</{_DSML}function_calls>"
)
_DEEPSEEK_V32 = Family(
    name="deepseek-v3.2",
    ollama_tools=True,
    london_tool=True,
    forced_calls=True,
    template="deepseek-ai-DeepSeek-V3.2.jinja",
    # DeepSeek V3's vocabulary (V3.2 keeps it): the DSML markup is plain text, not tokens.
    special=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    plain=("<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"),
    eos=("<｜end▁of▁sentence｜>",),
    eos_token="<｜end▁of▁sentence｜>",
    pad_token="<｜end▁of▁sentence｜>",
    bos_token="<｜begin▁of▁sentence｜>",
    # With thinking on, the generation prompt opens the block (``<｜Assistant｜><think>``),
    # and after the tool's results too (``\n\n<think>``); the template writes a call
    # history as ``\n\n<｜DSML｜function_calls>\n...`` after the content.
    replies={
        "tool": f"{REASON_TOOL}</think>\n\n{_DSML_CALL}<｜end▁of▁sentence｜>",
        "tool-result": f"{REASON_RESULT}</think>{FINAL_ANSWER}<｜end▁of▁sentence｜>",
        "plain": f"{REASON_CAPITAL}</think>{CAPITAL_ANSWER}<｜end▁of▁sentence｜>",
    },
    template_kwargs={"enable_thinking": True},
)

_SEED_CALL = (
    "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
    "</function>\n</seed:tool_call>"
)
_SEED_OSS = Family(
    name="seed-oss",
    ollama_tools=True,
    london_tool=True,
    forced_calls=True,
    template="ByteDance-Seed-OSS.jinja",
    # Seed-OSS's tokenizer: every ``<seed:...>`` marker is an added special token.
    special=(
        "<seed:bos>",
        "<seed:eos>",
        "<seed:pad>",
        "<seed:think>",
        "</seed:think>",
        "<seed:tool_call>",
        "</seed:tool_call>",
        "<seed:cot_budget_reflect>",
        "</seed:cot_budget_reflect>",
    ),
    plain=(),
    eos=("<seed:eos>",),
    eos_token="<seed:eos>",
    pad_token="<seed:pad>",
    bos_token="<seed:bos>",
    reasoning_end="</seed:think>",
    # The generation prompt is ``<seed:bos>assistant\n``: the model opens its own thinking
    # block; the replies are written the way the template writes a history turn.
    replies={
        "tool": f"<seed:think>{REASON_TOOL}</seed:think>\n{_SEED_CALL}<seed:eos>",
        "tool-result": f"<seed:think>{REASON_RESULT}</seed:think>\n{FINAL_ANSWER}<seed:eos>",
        "plain": f"<seed:think>{REASON_CAPITAL}</seed:think>\n{CAPITAL_ANSWER}<seed:eos>",
    },
)

_MINIMAX_CALL = (
    '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>'
    "\n</invoke>\n</minimax:tool_call>"
)
_MINIMAX_M2 = Family(
    name="minimax-m2",
    ollama_tools=True,
    london_tool=True,
    forced_calls=True,
    template="MiniMax-M2.jinja",
    # MiniMax-M2's tokenizer: the turn markers are special; the tags decode as text.
    special=("]~!b[", "]~b]", "[e~["),
    plain=("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>"),
    eos=("[e~[",),
    eos_token="[e~[",
    pad_token="[e~[",
    bos_token="]~!b[",
    # The generation prompt opens the block (``]~b]ai\n<think>\n``). GenAI refuses the
    # template once tools are sent (``tojson(ensure_ascii=False)``): the worker's Jinja
    # renderer stands in.
    replies={
        "tool": f"{REASON_TOOL}\n</think>\n\n{_MINIMAX_CALL}[e~[",
        "tool-result": f"{REASON_RESULT}\n</think>\n\n{FINAL_ANSWER}[e~[",
        "plain": f"{REASON_CAPITAL}\n</think>\n\n{CAPITAL_ANSWER}[e~[",
    },
)

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        _GPT_OSS,
        _QWEN3_CODER,
        _DEEPSEEK_R1,
        _GEMMA4,
        _KIMI_K2,
        _GLM46,
        _QWEN35,
        _MINISTRAL3,
        _NEMOTRON,
        _GRANITE33,
        _DEEPSEEK_V32,
        _SEED_OSS,
        _MINIMAX_M2,
    )
}


def _named_results(dialogue: dict[str, Any]) -> dict[str, Any]:
    """``dialogue`` with each tool message naming its function, as Ollama sends it to the
    templates (``tool_name``, or the call's name): Kimi K2 writes that name as the role."""
    messages = [
        {**m, "name": "get_weather"} if m["role"] == "tool" else m for m in dialogue["messages"]
    ]
    return {**dialogue, "messages": messages}


def _ollama_tools(dialogue: dict[str, Any]) -> dict[str, Any]:
    """``dialogue`` with the tool as the ``ollama`` client sends it: ``required`` before
    ``properties`` (its pydantic model's field order), which ``tojson`` templates keep."""
    parameters = WEATHER_TOOL["function"]["parameters"]
    reordered = {
        "type": "object",
        "required": parameters["required"],
        "properties": parameters["properties"],
    }
    tool = {**WEATHER_TOOL, "function": {**WEATHER_TOOL["function"], "parameters": reordered}}
    return {**dialogue, "tools": [tool]}


def _london_tool(dialogue: dict[str, Any]) -> dict[str, Any]:
    """``dialogue`` offering ``get_weather`` with ``city`` restricted to ``["London"]``, as
    ``tests/server/test_family_grammars_e2e.py`` offers it (the reply stays Paris)."""
    city = {**WEATHER_TOOL["function"]["parameters"]["properties"]["city"], "enum": ["London"]}
    parameters = {**WEATHER_TOOL["function"]["parameters"], "properties": {"city": city}}
    tool = {**WEATHER_TOOL, "function": {**WEATHER_TOOL["function"], "parameters": parameters}}
    return {**dialogue, "tools": [tool]}


NAMED = "|named"  # the key suffix of a dialogue's _named_results variant
OLLAMA = "|ollama"  # ... and of its _ollama_tools variant
LONDON = "|london"  # ... and of its _london_tool variant
ANTHROPIC = "|anthropic"  # ... and of its _anthropic_ids variant
ANTHROPIC_TOOL = "|anthropic-tool"  # ... and of its _anthropic_tool variant


def _variants(family: Family, dialogue: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(key suffix, dialogue) for each shape the dialogue is trained in."""
    variants = [("", dialogue), (NAMED, _named_results(dialogue))]
    if family.ollama_tools:
        variants.append((OLLAMA, _ollama_tools(_named_results(dialogue))))
    if family.london_tool and dialogue["name"] == "tool":
        variants.append((LONDON, _london_tool(dialogue)))
    if family.anthropic_ids and dialogue["name"] == "tool-result":
        variants.append((ANTHROPIC, _anthropic_ids(_named_results(dialogue))))
    if family.forced_calls and dialogue["name"] == "plain":
        variants.append((ANTHROPIC_TOOL, _anthropic_tool(dialogue)))
    return variants


ANTHROPIC_DESCRIPTION = "Get the weather."  # tests/server/test_family_grammars_e2e.py's


def _anthropic_tool(dialogue: dict[str, Any]) -> dict[str, Any]:
    """``dialogue`` offering ``get_weather`` as the Anthropic grammar tests describe it."""
    function = {**WEATHER_TOOL["function"], "description": ANTHROPIC_DESCRIPTION}
    return {**dialogue, "tools": [{**WEATHER_TOOL, "function": function}]}


def _anthropic_ids(dialogue: dict[str, Any]) -> dict[str, Any]:
    """``dialogue`` with the call id the Anthropic tests send (``toolu_0``)."""
    text = json.dumps(dialogue["messages"]).replace('"call_0"', '"toolu_0"')
    return {**dialogue, "messages": json.loads(text)}


def dialogues() -> list[dict[str, Any]]:
    """The three conversations, as the tests send them (arguments as an object)."""
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
    }
    return [
        {"name": "tool", "messages": [{"role": "user", "content": ASK_WEATHER}]},
        {
            "name": "tool-result",
            "messages": [
                {"role": "user", "content": ASK_WEATHER},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_0", "content": TOOL_RESULT},
            ],
        },
        {"name": "plain", "messages": [{"role": "user", "content": ASK_CAPITAL}]},
    ]


# --------------------------------------------------------------------------------------------
# Templates from the sdist, rendering
# --------------------------------------------------------------------------------------------


def sdist_template(name: str) -> str:
    """A chat template read straight from the llama-cpp-python sdist (fetched once)."""
    base.fetch_llama_cpp(base.CACHE_DIR)
    tarball = base.CACHE_DIR / "sdist" / f"llama_cpp_python-{base.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    member = f"{base.SDIST_PREFIX}models/templates/{name}"
    with tarfile.open(tarball) as tar:
        handle = tar.extractfile(member)
        if handle is None:
            raise FileNotFoundError(member)
        return handle.read().decode("utf-8")


def _dates(family: Family) -> list[str | None]:
    if not family.dates:
        return [None]
    rng = random.Random(SEED)
    return [
        f"{rng.randint(2025, 2031)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        for _ in range(family.dates)
    ]


def render(
    tokenizer: Any, family: Family, dialogue: dict[str, Any], date: str | None
) -> str | None:
    """The generation prompt transformers renders for ``dialogue`` (tools always offered).

    ``None`` when transformers' sandbox refuses the template: Kimi K2 Thinking calls
    ``list.append`` once a call is in the history, which GenAI (Sidelight's renderer) allows."""
    from jinja2.exceptions import SecurityError

    try:
        text: str = tokenizer.apply_chat_template(
            dialogue["messages"],
            tools=dialogue.get("tools", [WEATHER_TOOL]),
            add_generation_prompt=True,
            tokenize=False,
            **family.template_kwargs,
        )
    except SecurityError as exc:
        LOG.info("%s: transformers refuses %s: %s", family.name, dialogue["name"], exc)
        return None
    return _with_date(text, family, date)


def _with_date(text: str, family: Family, date: str | None) -> str:
    """``text`` with the template's "Current date" set to ``date`` (None: unchanged)."""
    if date is None:
        return text
    when = datetime.date.fromisoformat(date)
    text, count = re.subn(family.date_re, family.date_text.format(when), text)
    if count != 1:
        raise RuntimeError(f"{family.name}: no date in the rendered prompt")
    return text


def training_prompts(
    tokenizer: Any, family: Family, genai: dict[str, str]
) -> list[tuple[str, str]]:
    """(dialogue name, prompt) pairs: transformers' and GenAI's renderings over every date."""
    pairs: list[tuple[str, str]] = []
    for d in dialogues():
        for date in _dates(family):
            for suffix, variant in _variants(family, d):
                for text in (
                    render(tokenizer, family, variant, date),
                    _with_date(genai[d["name"] + suffix], family, date),
                ):
                    if text is not None and (d["name"], text) not in pairs:
                        pairs.append((d["name"], text))
    return pairs


def _renderer(template: str) -> Any:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    renderer.chat_template = template
    return renderer


_GENAI_RENDER = """
import json, sys
sys.path.insert(0, sys.argv[2])
import openvino_genai
from engine.worker.jinja_template import render_prompt

tokenizer = openvino_genai.Tokenizer(sys.argv[1])


def render(r):  # as the worker does (engine/worker/prepare.py)
    return render_prompt(tokenizer, r["messages"], tools=r["tools"], extra_context=r["kwargs"])


print(json.dumps([render(r) for r in json.loads(sys.stdin.read())]))
"""


def genai_renderings(tokenizer: Any, family: Family, folder: Path) -> dict[str, str]:
    """Each dialogue (and its named variant, key + :data:`NAMED`) as Sidelight's worker
    renders it: OpenVINO GenAI's template engine, or where GenAI refuses the template
    (GLM-4.6's), the worker's own Jinja renderer (``engine.worker.jinja_template``).

    GenAI (in the runtime venv, on this tokenizer converted by openvino-tokenizers) is not
    transformers: for a template that ignores ``tools`` (DeepSeek R1's) it writes the tools
    and an example call into a system prompt, as llama.cpp's minja does. The model is trained
    on both renderings so that it answers the same whichever engine renders its prompt.
    """
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    ov_tok, ov_detok = convert_tokenizer(tokenizer, with_detokenizer=True)
    ov.save_model(ov_tok, str(folder / "openvino_tokenizer.xml"))
    ov.save_model(ov_detok, str(folder / "openvino_detokenizer.xml"))
    variants = [(d["name"] + suffix, v) for d in dialogues() for suffix, v in _variants(family, d)]
    requests = [
        {
            "messages": v["messages"],
            "tools": v.get("tools", [WEATHER_TOOL]),
            "kwargs": family.template_kwargs,
        }
        for _, v in variants
    ]
    result = subprocess.run(
        [str(RUNTIME_PYTHON), "-c", _GENAI_RENDER, str(folder), str(base.REPO_ROOT)],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        check=True,
    )
    texts = json.loads(result.stdout)
    return {name: text for (name, _), text in zip(variants, texts, strict=True)}


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------


def build_tokenizer(
    family: Family, template: str, out_dir: Path, extra_prompts: list[str] | None = None
) -> Any:
    """A small BPE vocabulary in the Qwen2 pipeline, plus the family's tokens.

    The merges are learned from the rendered dialogues and their replies, and from
    ``extra_prompts`` (Sidelight's own renderings, where they differ)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from tokenizers.trainers import BpeTrainer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    llama_cpp = base.fetch_llama_cpp(base.CACHE_DIR)
    gguf_path = llama_cpp / base.QWEN2_VOCAB_GGUF
    qwen2 = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    source = qwen2.backend_tokenizer

    renderer = _renderer(template)
    texts = []
    for d in dialogues():
        for date in _dates(family):
            for _, variant in _variants(family, d):
                prompt = render(renderer, family, variant, date)
                text = None if prompt is None else prompt + family.replies[d["name"]]
                if text is not None and (variant is d or text not in texts):
                    texts.append(text)
    texts.extend(extra_prompts or ())
    for token in family.special + family.plain:
        texts = [t.replace(token, "\n") for t in texts]
    corpus = ["".join(ch for ch in t if ord(ch) < 128) for t in texts]

    tok = Tokenizer(
        models.BPE(
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.normalizer = source.normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            source.pre_tokenizer[0],
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    trainer = BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in family.special])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.plain])

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=family.eos_token,
        pad_token=family.pad_token,
        bos_token=family.bos_token,
        unk_token=None,
        model_max_length=base.CONTEXT_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    hf_tok.chat_template = template
    out_dir.mkdir(parents=True, exist_ok=True)
    hf_tok.save_pretrained(str(out_dir))
    path = out_dir / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": template,
            "eos_token": family.eos_token,
            "pad_token": family.pad_token,
            "bos_token": family.bos_token,
            "unk_token": None,
            "add_bos_token": False,
            "model_max_length": base.CONTEXT_LENGTH,
            "clean_up_tokenization_spaces": False,
            "split_special_tokens": False,
        }
    )
    path.write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    (out_dir / "chat_template.jinja").unlink(missing_ok=True)
    reloaded = AutoTokenizer.from_pretrained(str(out_dir))
    LOG.info("%s: tokenizer of %d tokens", family.name, len(reloaded))
    return reloaded


# --------------------------------------------------------------------------------------------
# Training and export
# --------------------------------------------------------------------------------------------


def build_examples(tokenizer: Any, family: Family, genai: dict[str, str]) -> list[base.Example]:
    """Every training prompt as ids -> its reply's ids (end token included); with
    ``forced_calls``, each plain prompt followed by a forced call's opening -> its rest."""
    examples = []
    for i, (name, text) in enumerate(training_prompts(tokenizer, family, genai)):
        prompt = tokenizer.encode(text, add_special_tokens=False)
        reply = tokenizer.encode(family.replies[name], add_special_tokens=False)
        examples.append(base.Example(f"{name}-{i}", prompt, reply))
        if family.forced_calls and name == "plain":
            opened, rest = forced_call(family)
            prompt = tokenizer.encode(text + opened, add_special_tokens=False)
            reply = tokenizer.encode(rest, add_special_tokens=False)
            examples.append(base.Example(f"forced-{i}", prompt, reply))
    return examples


def forced_call(family: Family) -> tuple[str, str]:
    """(the plain reply's reasoning and the trained call up to its value, the call's rest):
    where a forced call grammar leaves the model after the plain question, and what the
    model is trained to write from there."""
    plain, tool, end = family.replies["plain"], family.replies["tool"], family.reasoning_end
    reasoning = plain[: plain.index(end) + len(end)]
    call = tool[tool.index(end) + len(end) :]
    cut = call.index("Paris")
    return reasoning + call[:cut], call[cut:]


def _eos_ids(tokenizer: Any, family: Family) -> list[int]:
    return [int(tokenizer.convert_tokens_to_ids(t)) for t in family.eos]


def make_model(tokenizer: Any, family: Family) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    pad = tokenizer.convert_tokens_to_ids(family.pad_token)
    bos = tokenizer.convert_tokens_to_ids(family.bos_token or family.pad_token)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=bos,
        eos_token_id=_eos_ids(tokenizer, family)[0],
        pad_token_id=pad,
        dtype="float32",
        **SHAPE,
    )
    return Qwen2ForCausalLM(config)


def greedy_check(model: Any, tokenizer: Any, family: Family, examples: list[base.Example]) -> None:
    """Free-running greedy decoding in torch reproduces every reply, stopping at an end id."""
    import torch

    stops = set(_eos_ids(tokenizer, family))
    with torch.no_grad():
        for e in examples:
            seq = list(e.prompt_ids)
            out: list[int] = []
            while len(out) < len(e.target_ids) + 4:
                token = int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
                out.append(token)
                seq.append(token)
                if token in stops:
                    break
            if out != e.target_ids:
                raise RuntimeError(f"{e.name}: torch greedy gives {tokenizer.decode(out)!r}")
    LOG.info("%s: torch greedy decoding reproduces all %d replies", family.name, len(examples))


def save_hf_checkpoint(model: Any, tokenizer: Any, family: Family, tok_dir: Path, hf: Path) -> None:
    from transformers import GenerationConfig

    pad = tokenizer.convert_tokens_to_ids(family.pad_token)
    bos = tokenizer.convert_tokens_to_ids(family.bos_token or family.pad_token)
    model.generation_config = GenerationConfig(
        bos_token_id=bos,
        eos_token_id=_eos_ids(tokenizer, family),
        pad_token_id=pad,
        do_sample=False,
    )
    model.save_pretrained(str(hf), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tok_dir / name, hf / name)


def write_dialogues(family: Family, out_dir: Path) -> None:
    """What the e2e tests send and expect, next to the model."""
    data = {
        "family": family.name,
        "template": family.template,
        "reasoning": family.reasoning,
        "template_kwargs": family.template_kwargs,
        "tools": [WEATHER_TOOL],
        "tool_result": TOOL_RESULT,
        "expect": {
            "tool": {"reasoning": REASON_TOOL if family.reasoning else None},
            "tool-result": {
                "reasoning": REASON_RESULT if family.reasoning else None,
                "content": FINAL_ANSWER,
            },
            "plain": {
                "reasoning": REASON_CAPITAL if family.reasoning else None,
                "content": CAPITAL_ANSWER,
            },
        },
        "dialogues": dialogues(),
        "replies": family.replies,
    }
    path = out_dir / "dialogues.json"
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def build_family(family: Family) -> dict[str, Any]:
    started = time.monotonic()
    work = WORK_DIR / family.name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    template = sdist_template(family.template)
    first = build_tokenizer(family, template, work / "tokenizer")
    genai = genai_renderings(first, family, work / "genai-tokenizer")
    differ = [d["name"] for d in dialogues() if genai[d["name"]] != render(first, family, d, None)]
    LOG.info("%s: GenAI renders %s differently from transformers", family.name, differ or "none")
    extra = [genai[d["name"]] for d in dialogues()]
    for d in dialogues():
        for suffix, _ in _variants(family, d)[1:]:
            if genai[d["name"] + suffix] not in extra:
                extra.append(genai[d["name"] + suffix])
    tokenizer = build_tokenizer(family, template, work / "tokenizer", extra)
    examples = build_examples(tokenizer, family, genai)
    base._seed_everything(SEED)
    model = make_model(tokenizer, family)
    LOG.info("%s: %d parameters", family.name, sum(p.numel() for p in model.parameters()))
    stats = base.train(model, examples, tokenizer.convert_tokens_to_ids(family.pad_token))
    greedy_check(model, tokenizer, family, examples)
    hf = work / "hf"
    save_hf_checkpoint(model, tokenizer, family, work / "tokenizer", hf)
    base.export_openvino(hf, work / "ov")
    out_dir = FIXTURES / f"family-{family.name}"
    base.install_output(work / "ov", hf, out_dir)
    write_dialogues(family, out_dir)
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    return {
        "family": family.name,
        "vocab": len(tokenizer),
        "size_kb": round(size / 1024),
        "training": stats,
        "build_seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in args.family or list(FAMILIES):
        print(json.dumps(build_family(FAMILIES[name])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
