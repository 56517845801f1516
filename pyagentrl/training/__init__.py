"""Training: configs, the DeepSpeed learner, the loop (``pyagentrl train``), checkpoints, metrics, evaluation and
plots. Depends on rollout, ops, hashing and envs; nothing depends on it but the testbed's report, which reuses the
interval statistics of ``training.stats``. DeepSpeed, peft, OmegaConf, TensorBoard, rich and matplotlib (the "train"
extra) are imported where they are used."""

from pyagentrl.training.config import ConfigError, TrainConfig, load_config, validate

__all__ = ["ConfigError", "TrainConfig", "load_config", "validate"]
