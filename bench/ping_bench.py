"""How long a busy engine worker leaves a ping unanswered: the margin ``stall_seconds`` needs.

The worker answers the watchdog's pings between engine steps (and between encoder chunks),
so the longest unanswered ping while it serves is about its longest step. ``/health`` says
``stalled`` once a ping waits past ``Settings.stall_seconds``; a busy step must never read
as that. This measures, on a real worker (EngineClient, batched backend), the longest wait
of any ping while it is idle, runs one long prompt (its prefill is the longest step:
``dynamic_split_fuse`` cuts it into 256-token chunks), and runs four long prompts at once.

Method: ``stall_seconds`` is set to 1 ms, so the status reports every outstanding ping's
age (``stalled_seconds``); pings go every 50 ms; a thread samples the status every 2 ms and
keeps the largest age per phase (resolution: the sampling interval).

Models: the demo model, and a Qwen2.5-0.5B-shaped GGUF (hidden 896, 24 layers, 14 heads,
2 KV heads, FFN 4864, random f16 weights, the demo model's 931-token tokenizer) that
``--build-05b`` writes from the demo GGUF in a few seconds (~720 MB).

Run: ``python -m bench.ping_bench --build-05b /tmp/qwen05b-shape.gguf`` then
``python -m bench.ping_bench --model /tmp/qwen05b-shape.gguf``. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import struct
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.models import spec_from_path
from engine.settings import load_settings
from engine.supervisor.client import EngineClient
from engine.supervisor.states import ERROR, READY, RequestFailed
from engine.worker.messages import GenerationRequest, SamplingParams
from tests.engine import gguf_builder as gb

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "resources" / "models" / "sidelight-demo"
DEMO_GGUF = ROOT / "tests" / "fixtures" / "sidelight-demo-f16.gguf"
# The demo's sizes -> Qwen2.5-0.5B's: hidden, FFN, KV width (2 heads x 16 -> 2 x 64).
_SCALE = {64: 896, 192: 4864, 32: 128}
_SHAPE = {
    "qwen2.block_count": 24,
    "qwen2.embedding_length": 896,
    "qwen2.feed_forward_length": 4864,
    "qwen2.attention.head_count": 14,
    "qwen2.attention.head_count_kv": 2,
    "qwen2.context_length": 4096,
}
_F32, _F16 = 0, 1

logger = logging.getLogger(__name__)


def build_05b(out: Path) -> Path:
    """Write the Qwen2.5-0.5B-shaped GGUF (random weights, the demo tokenizer) to ``out``."""
    demo = gb.load(DEMO_GGUF)
    parts = demo
    for key, value in _SHAPE.items():
        parts = parts.set(key, gb.U32, gb.u32(value))
    block = [t for t in demo.tensors if t.name.startswith(b"blk.0.")]
    names = [t for t in demo.tensors if not t.name.startswith(b"blk.")]
    tensors: list[gb.Tensor] = []
    for t in names[:1]:  # token_embd first, as the converter writes it
        tensors.append(replace(t, dims=[_SCALE.get(d, d) for d in t.dims]))
    for layer in range(_SHAPE["qwen2.block_count"]):
        for t in block:
            name = t.name.replace(b"blk.0.", f"blk.{layer}.".encode())
            tensors.append(replace(t, name=name, dims=[_SCALE.get(d, d) for d in t.dims]))
    for t in names[1:]:
        tensors.append(replace(t, dims=[_SCALE.get(d, d) for d in t.dims]))
    rng = np.random.default_rng(0)
    data = bytearray()
    for i, t in enumerate(tensors):
        data += b"\0" * (-len(data) % parts.alignment)
        count = int(np.prod(t.dims))
        if t.type_id == _F16:
            values = (rng.standard_normal(count, dtype=np.float32) * 0.02).astype(np.float16)
        else:
            fill = 1.0 if t.name.endswith(b"norm.weight") else 0.0
            values = np.full(count, fill, dtype=np.float32)
        tensors[i] = replace(t, offset=len(data))
        data += values.tobytes()
    parts = replace(parts, tensors=tensors, data=bytes(data))
    parts = parts.set("general.size_label", gb.STRING, gb.string("0.5B-shape"))
    out.write_bytes(parts.to_bytes())
    assert struct.unpack_from("<I", out.read_bytes(), 0)[0] == struct.unpack("<I", b"GGUF")[0]
    return out


class _Sampler:
    """Samples the client's status on a thread; the largest unanswered-ping age so far."""

    def __init__(self, client: EngineClient) -> None:
        self._client = client
        self.largest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            waited = self._client.status().stalled_seconds
            if waited is not None:
                self.largest = max(self.largest, waited)


async def _run(client: EngineClient, prompts: list[str], max_tokens: int) -> list[int]:
    """Stream ``prompts`` at once; their prompt sizes (tokens)."""

    async def one(text: str) -> int:
        request = GenerationRequest(
            messages=[{"role": "user", "content": text}],
            max_tokens=max_tokens,
            sampling=SamplingParams(temperature=1.0, seed=7, ignore_eos=True),
        )
        stream = client.submit(request)
        async for _ in stream:
            pass
        return stream.prompt_tokens or 0

    return list(await asyncio.gather(*(one(p) for p in prompts)))


def _long_prompt(client: EngineClient, chars: int, salt: int) -> str:
    """Repository text of about ``chars`` characters that fits the context with room for
    64 new tokens and one more leading character (shrunk until the worker accepts it)."""
    text = (ROOT / "docs" / "architecture.md").read_text() * 8
    while chars > 200:
        prompt = f"{salt}: " + text[salt * 97 : salt * 97 + chars]
        try:
            asyncio.run(_run(client, ["x" + prompt], 80))
            return prompt
        except RequestFailed:
            chars = int(chars * 0.8)
    raise RuntimeError("no prompt fits")


def measure(model: Path, home: Path) -> dict[str, Any]:
    env = {
        "SIDELIGHT_HOME": str(home),
        "SIDELIGHT_STALL_SECONDS": "0.001",
        "SIDELIGHT_CPU_SELF_TUNE": "false",
        "SIDELIGHT_PROMPT_LOOKUP": "0",
    }
    settings = load_settings(env)
    settings.paths.ensure()
    client = EngineClient(settings, backend="batched")
    client.start()
    try:
        client.load(spec_from_path(model))
        status = client.wait_for({READY, ERROR}, 900)
        if status.state != READY:
            raise RuntimeError(status.message)
        result: dict[str, Any] = {"model": model.name, "context": status.context_length}
        context = status.context_length or 2048
        fits = _long_prompt(client, context * 3, 1)
        # New first characters: nothing of them is in the prefix cache, the prefill is whole.
        prompts = [f"{n}{fits}" for n in "abcde"]
        with _Sampler(client) as idle:
            time.sleep(5)
        result["idle_max_unanswered_s"] = round(idle.largest, 3)
        for name, batch in (("one_long_prompt", prompts[:1]), ("four_long_prompts", prompts[1:])):
            started = time.monotonic()
            with _Sampler(client) as busy:
                sizes = asyncio.run(_run(client, batch, 64))
            result[name] = {
                "prompt_tokens": sizes,
                "seconds": round(time.monotonic() - started, 2),
                "max_unanswered_s": round(busy.largest, 3),
            }
        result["load_average"] = [round(x, 1) for x in os.getloadavg()]
        return result
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, action="append", help="an IR folder or GGUF")
    parser.add_argument("--build-05b", type=Path, help="write the 0.5B-shaped GGUF here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.build_05b:
        print(build_05b(args.build_05b))
        return
    with tempfile.TemporaryDirectory() as home:
        results = [measure(m, Path(home)) for m in args.model or [DEMO]]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
