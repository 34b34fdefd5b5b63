"""Compile a request's output grammar on a throwaway pipeline before the real one sees it.

GenAI compiles a structured-output grammar (XGrammar) inside ``ContinuousBatchingPipeline
.step()``, not in ``GenerationConfig.validate()`` or ``add_request``, and has no Python API
to compile one alone. A grammar that fails there (``{"enum": []}``, a regex lookahead in a
``pattern``, ``minLength`` > ``maxLength``, a ``$ref`` to nothing) makes that step raise, and
the pipeline never steps again ("already in scheduling phase"): every stream on it ends and
the model must be reloaded. So the worker first runs each new grammar for one token on a
second pipeline over the tiny demo model that ships with Sidelight (under a megabyte, loaded
on the first constrained request). Grammar errors come from parsing the schema, regex and
EBNF, which does not depend on the vocabulary, so the demo model's tokenizer finds them.
A failed probe only costs rebuilding the probe pipeline (a fraction of a second).

Results are cached per schema: agents send the same tool schemas with every request.

Threading: used only from the worker's single loop thread.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any

from engine.worker.errors import short_error
from engine.worker.messages import OutputConstraint

logger = logging.getLogger(__name__)

CACHE_SIZE = 256
_MAX_STEPS = 4  # one token: the prompt step and at most a few more


class GrammarProbe:
    """Tells whether GenAI can compile a structured-output config, without risking a model."""

    def __init__(self, model_dir: Path | None = None) -> None:
        self._model_dir = model_dir
        self._pipe: Any = None
        self._unavailable = False
        self._results: OrderedDict[tuple[str, str, str], str | None] = OrderedDict()
        self._ids = 0

    def check(self, constraint: OutputConstraint, structured: Any) -> str | None:
        """None when ``structured`` (built from ``constraint``) compiles, else why not."""
        key = (constraint.json_schema, constraint.begin, constraint.end)
        if key in self._results:
            self._results.move_to_end(key)
            return self._results[key]
        pipe = self._pipeline()
        if pipe is None:
            return None  # cannot probe: the step isolation in the backend still applies
        error = self._run(pipe, structured)
        self._results[key] = error
        if len(self._results) > CACHE_SIZE:
            self._results.popitem(last=False)
        return error

    def _run(self, pipe: Any, structured: Any) -> str | None:
        import numpy as np
        import openvino as ov
        import openvino_genai as ov_genai

        config = ov_genai.GenerationConfig()
        config.max_new_tokens = 1
        config.do_sample = False
        config.structured_output_config = structured
        self._ids += 1
        try:
            handle = pipe.add_request(self._ids, ov.Tensor(np.array([[1]], dtype=np.int64)), config)
            for _ in range(_MAX_STEPS):
                if not pipe.has_non_finished_requests():
                    break
                pipe.step()
            handle.cancel()
        except Exception as exc:
            logger.info("grammar refused by the probe: %s", exc)
            self._pipe = None  # a failed step leaves a pipeline unusable
            return short_error(exc)
        return None

    def _pipeline(self) -> Any:
        if self._pipe is not None or self._unavailable:
            return self._pipe
        try:
            import openvino_genai as ov_genai

            from engine.resources import demo_model_path

            folder = self._model_dir or demo_model_path()
            scheduler = ov_genai.SchedulerConfig()
            scheduler.num_kv_blocks = 16  # a one-token prompt needs one
            scheduler.enable_prefix_caching = False
            self._pipe = ov_genai.ContinuousBatchingPipeline(
                str(folder), scheduler, "CPU", {"INFERENCE_NUM_THREADS": 1}
            )
        except Exception:
            logger.warning("no grammar probe: schemas are not checked early", exc_info=True)
            self._unavailable = True
        return self._pipe

    def close(self) -> None:
        self._pipe = None
