"""A model2vec model read from a local directory without huggingface_hub.

``StaticModel.from_pretrained`` imports model2vec's persistence and model-card modules,
which import huggingface_hub (its HTTP client and hub API): ~0.6 s of CPU, at every start
of ``searcher index add`` and ``serve``, for a model that is already on disk. This reads
the same files model2vec's ``load_pretrained`` reads for its own folder layout
(``config.json``, ``model.safetensors``, ``tokenizer.json``) and builds the model as its
``from_pretrained`` does; any other layout is left to model2vec.

The README's metadata (base model, language) is not read: model2vec uses it only to
write a model card when a model is saved, which the searcher never does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_CONFIG = "config.json"
_EMBEDDINGS = "model.safetensors"
_TOKENIZER = "tokenizer.json"


def load_local_static_model(folder: Path) -> Any | None:
    """The model2vec ``StaticModel`` in ``folder`` (model2vec's own layout), or ``None``
    when the folder has another layout (then ``StaticModel.from_pretrained`` loads it)."""
    if not all((folder / name).is_file() for name in (_CONFIG, _EMBEDDINGS, _TOKENIZER)):
        return None
    import safetensors
    from model2vec import StaticModel
    from model2vec.model import _DEFAULT_NORMALIZE, DEFAULT_MAX_LENGTH
    from tokenizers import Tokenizer

    tensors = safetensors.safe_open(str(folder / _EMBEDDINGS), framework="numpy")
    names = set(tensors.keys())
    config: dict[str, Any] = json.loads((folder / _CONFIG).read_text(encoding="utf-8"))
    return StaticModel(
        vectors=tensors.get_tensor("embeddings"),
        tokenizer=Tokenizer.from_file(str(folder / _TOKENIZER)),
        weights=tensors.get_tensor("weights") if "weights" in names else None,
        token_mapping=tensors.get_tensor("mapping") if "mapping" in names else None,
        config=config,
        normalize=config.get("normalize", _DEFAULT_NORMALIZE),
        max_length=config.get("max_length", DEFAULT_MAX_LENGTH),
    )
