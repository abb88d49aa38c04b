"""BEIR SciFact from ``../shared/data/scifact/``: abstracts, queries and judgements."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from searcher.ranking.evaluation import Qrels, read_qrels
from tests.shared_data import shared_path

DATA = shared_path("data/scifact")


@dataclass(frozen=True)
class Doc:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class SciFact:
    docs: tuple[Doc, ...]
    queries: dict[str, str]  # query id -> text
    train: Qrels
    test: Qrels

    def texts(self, qrels: Qrels) -> dict[str, str]:
        """The text of every judged query of ``qrels``."""
        return {qid: self.queries[qid] for qid in qrels}


def _jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load(root: Path = DATA) -> SciFact:
    docs = tuple(
        Doc(str(d["_id"]), d.get("title") or "", d.get("text") or "")
        for d in _jsonl(root / "corpus.jsonl")
    )
    queries = {str(q["_id"]): q["text"] for q in _jsonl(root / "queries.jsonl")}
    return SciFact(
        docs,
        queries,
        read_qrels(root / "qrels" / "train.tsv"),
        read_qrels(root / "qrels" / "test.tsv"),
    )
