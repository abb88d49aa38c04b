"""The ranking collections, each with a development and a held-out split of its queries.

- SciFact (``../shared/data/scifact/``): dev = the train judgements (first ``DEV_CAP``
  queries, to keep the run short), held out = the test judgements (300 queries).
- Cranfield 1400 (``../shared/data/cranfield/``): dev = the odd-numbered queries, held out
  = the even-numbered ones. Relevance codes 1 (complete answer) .. 4 (minimum interest)
  become gains 4 .. 1; ``cranqrel`` numbers queries 1..225 in file order.

Defaults are tuned on ``dev`` only; ``test`` is looked at for the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from bench.ranking_parts.scifact import Doc
from bench.ranking_parts.scifact import load as load_scifact_files
from searcher.ranking.evaluation import Qrels
from tests.shared_data import shared_path

DATA = shared_path("data")
DEV_CAP = 300


@dataclass(frozen=True)
class Collection:
    name: str
    docs: tuple[Doc, ...]
    queries: dict[str, str]
    dev: Qrels
    test: Qrels

    def texts(self, qrels: Qrels) -> dict[str, str]:
        return {qid: self.queries[qid] for qid in qrels}


def scifact() -> Collection:
    data = load_scifact_files(DATA / "scifact")
    dev = dict(list(sorted(data.train.items()))[:DEV_CAP])
    return Collection("scifact", data.docs, data.queries, dev, data.test)


_FIELD = re.compile(r"^\.([IWTAB])\s*(.*)$")


def _smart(path: Path) -> list[dict[str, str]]:
    """Records of a SMART-format file: ``.I id`` then ``.T``/``.A``/``.B``/``.W`` fields."""
    records: list[dict[str, str]] = []
    field = ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        match = _FIELD.match(line)
        if match and match.group(1) == "I":
            records.append({"I": match.group(2).strip()})
            field = ""
        elif match:
            field = match.group(1)
            records[-1][field] = match.group(2)
        elif records and field:
            records[-1][field] = (records[-1].get(field, "") + " " + line).strip()
    return records


def cranfield() -> Collection:
    root = DATA / "cranfield"
    docs = tuple(
        Doc(r["I"], " ".join(r.get("T", "").split()), " ".join(r.get("W", "").split()))
        for r in _smart(root / "cran.all.1400")
    )
    queries = {
        str(n): " ".join(r.get("W", "").split())
        for n, r in enumerate(_smart(root / "cran.qry"), start=1)
    }
    qrels: dict[str, dict[str, int]] = {}
    for line in (root / "cranqrel").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and 1 <= int(parts[2]) <= 4:
            qrels.setdefault(parts[0], {})[parts[1]] = 5 - int(parts[2])
    dev = {q: r for q, r in qrels.items() if int(q) % 2 == 1}
    test = {q: r for q, r in qrels.items() if int(q) % 2 == 0}
    return Collection("cranfield", docs, queries, dev, test)


def load_all() -> list[Collection]:
    return [scifact(), cranfield()]
