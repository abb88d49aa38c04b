"""Evaluation sets frozen from recordings (``searcher freeze``): self-contained, read
without the network by ``searcher tune --set`` (its searches replayed from the
recordings) and ``searcher eval`` (the recorded run).

A set is a directory::

    manifest.json          format, and each query id's recorded request id
    queries.tsv            qid<TAB>query        (what ``--queries`` reads)
    run.trec               the recorded results as a TREC run (``searcher eval``)
    pooled.tsv             qid<TAB>url<TAB>backend<TAB>title: every backend's results,
                           for judging
    recordings/QID.json.gz each recording whole: backend answers, pages, LLM replies

A query's id is its recording's request id.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from searcher.backends.base import Hit
from searcher.ranking.evaluation import format_queries
from searcher.recording.book import Recording

FORMAT = 1
MANIFEST = "manifest.json"


class FrozenSetError(ValueError):
    """A directory that is not a readable frozen set; the message says why."""


@dataclass(frozen=True)
class FrozenSet:
    queries: dict[str, str]  # qid -> query text
    recordings: dict[str, Recording]  # qid -> its recording


def _clean(text: str) -> str:
    return " ".join(text.split())


def run_lines(qid: str, response: dict[str, object]) -> list[str]:
    """The recorded items as TREC run lines (rank order, scores descending)."""
    items = response.get("items")
    items = items if isinstance(items, list) else []
    n = len(items)
    return [f"{qid} Q0 {item['url']} {i} {n - i + 1} searcher" for i, item in enumerate(items, 1)]


def check_destination(out: Path) -> None:
    """``FrozenSetError`` unless ``out`` may take a set: missing, empty, or an earlier set
    (a manifest of this format), which is replaced. A set's files have common names
    (queries.tsv, run.trec): written into any folder they would replace the user's own."""
    try:
        if not out.is_dir() or not any(out.iterdir()):
            return  # a file there, or one that cannot be listed: the write says so
        manifest = json.loads((out / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        manifest = None
    if isinstance(manifest, dict) and manifest.get("format") == FORMAT:
        return
    raise FrozenSetError(
        f"{out} holds files and is not a frozen set: a set writes {MANIFEST}, queries.tsv, "
        "run.trec, pooled.tsv and recordings/ there; give a new or empty folder"
    )


def freeze(
    recordings: Sequence[Recording], pooled_hits: Mapping[str, Sequence[Hit]], out: Path
) -> FrozenSet:
    """Write the set (see the module) into ``out`` (made if missing); ``pooled_hits``:
    each query's pooled backend results (``pipeline.replay.pooled`` of its replayed
    searches). ``OSError`` when it cannot be written, ``FrozenSetError`` when ``out``
    holds other files (``check_destination``)."""
    check_destination(out)
    (out / "recordings").mkdir(parents=True, exist_ok=True)
    queries: dict[str, str] = {}
    run: list[str] = []
    pooled: list[str] = []
    for recording in recordings:
        qid = recording.request_id
        query = recording.request.get("query")
        text = query.get("text") if isinstance(query, dict) else query
        queries[qid] = _clean(str(text))
        run += run_lines(qid, recording.response)
        pooled += [
            "\t".join((qid, hit.url, hit.backend, _clean(hit.title)))
            for hit in pooled_hits.get(qid, ())
        ]
        path = out / "recordings" / f"{qid}.json.gz"
        # Which API key made the search stays with the server: a set is given away.
        given_away = replace(recording, key=None)
        path.write_bytes(gzip.compress(orjson.dumps(given_away.to_json()), mtime=0))
    for kept in (out / "recordings").glob("*.json.gz"):  # an earlier set's, frozen here
        if kept.name.removesuffix(".json.gz") not in queries:
            kept.unlink()
    manifest = {"format": FORMAT, "queries": sorted(queries)}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    (out / "queries.tsv").write_text(format_queries(queries), "utf-8")
    (out / "run.trec").write_text("".join(f"{line}\n" for line in run), "utf-8")
    (out / "pooled.tsv").write_text("".join(f"{line}\n" for line in pooled), "utf-8")
    return FrozenSet(queries, {r.request_id: r for r in recordings})


def read_set(directory: Path) -> FrozenSet:
    """The set in ``directory``; ``FrozenSetError`` saying what is missing or broken."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text("utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise FrozenSetError(f"{directory}: not a frozen set of format {FORMAT}")
        listed = manifest.get("queries")
        if not isinstance(listed, list) or not all(isinstance(q, str) for q in listed):
            raise FrozenSetError(f"{directory}: {MANIFEST} lists no queries")
        recordings = {}
        for qid in listed:
            raw = (directory / "recordings" / f"{qid}.json.gz").read_bytes()
            recordings[qid] = Recording.from_json(orjson.loads(gzip.decompress(raw)))
        lines = (directory / "queries.tsv").read_text("utf-8").splitlines()
    except OSError as exc:
        raise FrozenSetError(f"{directory}: cannot read the set ({exc})") from None
    except (ValueError, KeyError, TypeError, EOFError, zlib.error) as exc:
        raise FrozenSetError(f"{directory}: not a readable frozen set ({exc})") from None
    queries = {}
    for line in lines:
        qid, _, text = line.partition("\t")
        if qid in recordings:
            queries[qid] = text
    return FrozenSet(queries, recordings)
