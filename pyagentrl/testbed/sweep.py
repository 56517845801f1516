"""Anchor quality against the true state, per text-anchor mode and setting, without training.

On the episodes of the uniform random mover at every noise level of a study: the share of rows that get step-level
credit (in anchor groups of two or more) and how pure those groups are
(:func:`pyagentrl.testbed.loop.anchor_quality`). The embeddings of a batch are encoded once for all thresholds and
grouped by :func:`~pyagentrl.hashing.group_embeddings`, what ``StateKeyer.assign`` does without ``match_objects``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyagentrl.hashing import StateKeyer, group_embeddings
from pyagentrl.testbed.loop import TaskSpec, anchor_quality, keyer_for, uniform_episodes
from pyagentrl.testbed.spec import Spec


def _settings(spec: Spec) -> list[tuple[str, dict[str, Any]]]:
    settings: list[tuple[str, dict[str, Any]]] = [("exact", {})]
    settings += [("minhash", {"threshold": t}) for t in spec.sweep.minhash]
    settings += [("simhash", {"k": k}) for k in spec.sweep.simhash]
    settings += [("embedding", {"threshold": t}) for t in spec.sweep.embedding]
    return settings


def anchor_sweep(task: TaskSpec, spec: Spec) -> list[dict[str, Any]]:
    oracle = StateKeyer(mode="exact")
    out = []
    for noise in ("none", *spec.noise_levels):
        batches = uniform_episodes(task, spec.settings, noise, spec.sweep.iterations, seed=0, stream="sweep")
        groups = [np.asarray(e.group_ids, dtype=np.int64) for e in batches]
        truth = [oracle.assign(e.states, g) for e, g in zip(batches, groups, strict=True)]
        encoded: list[np.ndarray] | None = None
        for mode, options in _settings(spec):
            base = {k: v for k, v in spec.anchors.get(mode, {}).items() if k not in ("threshold", "k")}
            keyer = keyer_for(mode, {**base, **options})
            if mode == "embedding" and not base.get("match_objects"):
                if encoded is None:
                    encoded = [keyer.keys(e.texts) for e in batches]
                ids = [group_embeddings(x, g, options["threshold"]) for x, g in zip(encoded, groups, strict=True)]
            else:
                ids = [keyer.assign(e.texts, g) for e, g in zip(batches, groups, strict=True)]
            rows = [(len(g), anchor_quality(i, t, g)) for g, i, t in zip(groups, ids, truth, strict=True)]
            total = sum(n for n, _ in rows)
            quality = {key: sum(n * q[key] for n, q in rows) / total for key in rows[0][1]}
            out.append({"noise": noise, "mode": mode, **options, **quality})
    return out
