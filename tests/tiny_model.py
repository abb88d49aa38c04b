"""A tiny static embedding model in model2vec's format, built by the test suite itself.

The plumbing tests (near-duplicate removal wired into a search, the semantic cache, the
embedder's loading and reporting) need a model that loads from a directory as the real
one does, not its quality: a WordPiece tokenizer trained on the repository's own prose and
a seeded random vector per token, scaled down for frequent tokens as the real model's SIF
weighting does (``the``, ``and``, commas weigh little). A bag of random word vectors still
scores texts with the same words near 1 and unrelated texts near 0. The quality gates use
the real model (``../shared/models``, see tests/shared_data.py).

Built once per machine and kept in the temporary directory under a name that hashes what
went into it; a build goes to a private folder first and is renamed into place, so two
test runs at once never see half a model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tests.shared_data import REPO

DIMENSION = 256  # as the real model's, so tests of stored vectors hold for both
VOCABULARY = 3000
SIF = 1e-3  # a token seen this often (share of all tokens) weighs a half
RECIPE = 2  # part of the kept model's name: change it when the way it is built changes
_SPECIAL = ["[PAD]", "[UNK]"]
# Words the tests search for that the repository's prose may lack, so each is one token.
_EXTRA_WORDS = (
    "google stadia microsoft xcloud apple arcade games cloud gaming python sourdough bread "
    "everest france population airport sleep pregnancy pizza dough hike children"
)


def _training_texts() -> Iterator[str]:
    for path in sorted([REPO / "README.md", *(REPO / "docs").glob("**/*.md")]):
        yield path.read_text(encoding="utf-8")


def _fingerprint(texts: list[str]) -> str:
    digest = hashlib.sha256(f"{RECIPE}:{DIMENSION}:{VOCABULARY}:{SIF}".encode())
    for text in texts:
        digest.update(text.encode())
    return digest.hexdigest()[:16]


def _token_vector(token: str) -> np.ndarray:
    """The same vector for the same token, whatever id the trainer gave it; a plural and
    its singular share one ("services", "service"), as they nearly do in a real model."""
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        token = token[:-1]
    rng = np.random.default_rng(zlib.crc32(token.encode()))
    return rng.standard_normal(DIMENSION).astype(np.float32)


def _build(texts: list[str], target: Path) -> None:
    from model2vec import StaticModel
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=VOCABULARY, special_tokens=_SPECIAL, show_progress=False
    )
    # The extra words, repeated, so that each becomes a token of its own.
    tokenizer.train_from_iterator([*texts, *[_EXTRA_WORDS] * 50], trainer)
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    counts = np.zeros(len(vocabulary))
    for encoding in tokenizer.encode_batch(texts):
        np.add.at(counts, encoding.ids, 1)
    weights = SIF / (SIF + counts / max(1.0, counts.sum()))
    vectors = np.stack([_token_vector(token) for token, _ in vocabulary])
    vectors *= weights[:, None].astype(np.float32)
    vectors[0] = 0.0  # [PAD]
    StaticModel(vectors=vectors, tokenizer=tokenizer, normalize=True).save_pretrained(str(target))


def tiny_model_dir() -> Path:
    """The tiny model's directory, built on first use."""
    texts = list(_training_texts())
    target = Path(tempfile.gettempdir()) / f"searcher-tiny-model-{_fingerprint(texts)}"
    if (target / "config.json").is_file():
        return target
    scratch = Path(tempfile.mkdtemp(prefix=target.name + "-build-"))
    try:
        _build(texts, scratch / "model")
        try:
            os.rename(scratch / "model", target)
        except OSError:  # another run renamed its build into place first: use that one
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target
