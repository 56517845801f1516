"""The training configuration: a typed schema (dataclasses), YAML files in ``train/configs/`` and ``key=value``
overrides, through OmegaConf.

Why OmegaConf: its structured configs turn these dataclasses into a schema, so a YAML key or an override that does
not exist, or a value of the wrong type, is refused with its full dotted name before any work; it reads YAML, takes
``a.b=c`` overrides (the grammar of Hydra and verl, which many users know) and writes the resolved config back as
YAML. Hydra builds on it but also takes over the working directory, logging and launching, which the trainer does
itself; pydantic validates as well but has no override grammar.

Checks that need more than a type (known names, divisibility, a model that exists) are in :func:`validate`, which
the trainer calls before it builds anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEEPSPEED_DIR = "deepspeed"  # ZeRO configs: train/deepspeed/*.json, found next to the configs directory


@dataclass
class EnvConfig:
    name: str = "frozenlake"  # a name of pyagentrl.envs.ENVS
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the environment
    num_groups: int = 4  # task groups per iteration, over all ranks
    group_size: int = 4  # rollouts per task (GiGPO's N)
    backend: str = "thread"  # EnvBatch backend: thread, process or serial
    workers: int | None = None


@dataclass
class RolloutSettings:
    engine: str = "vllm"  # vllm or hf
    engine_options: dict[str, Any] = field(default_factory=dict)  # e.g. dtype, kv_cache_gib, max_batch_size
    prompting: str = "window"  # window (verl-agent's) or conversation
    turn_format: str = "full"  # conversation's later turns: full (the whole prompt) or compact (observation, actions)
    history_length: int = 2
    invalid_action_penalty: float = 0.1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop: list[str] = field(default_factory=list)
    system_prompt: str | None = None
    answer_format: str = "reason"  # reason (<think> then <action>, verl-agent's) or direct (the action alone)
    response_prefix: str = ""  # prefilled start of every reply, e.g. "<action>" (with stop ["</action>"])


@dataclass
class AnchorConfig:
    mode: str = "exact"  # exact, minhash, simhash or embedding (pyagentrl.hashing.StateKeyer)
    options: dict[str, Any] = field(default_factory=dict)  # other StateKeyer settings: threshold, k, model, ...
    time_aware: bool = False  # rows share an anchor only at the same step (rollout.RolloutConfig.time_aware_anchors)


@dataclass
class ScheduleConfig:
    """A value that moves from ``start`` to ``end`` over ``iterations`` iterations, then stays at ``end``."""

    schedule: str = "constant"  # constant (always start), linear or cosine
    start: float = 1.0
    end: float = 1.0
    iterations: int = 0

    def at(self, iteration: int) -> float:
        if self.schedule == "constant" or self.iterations <= 0:
            return self.start if self.schedule == "constant" else self.end
        t = min(iteration / self.iterations, 1.0)
        if self.schedule == "linear":
            return self.start + (self.end - self.start) * t
        return self.end + (self.start - self.end) * (1 + math.cos(math.pi * t)) / 2


@dataclass
class AlgorithmConfig:
    estimator: str = "gigpo"  # a name of pyagentrl.ops.ADV_ESTIMATORS: grpo, gigpo, gagpo, or one you register
    gamma: float = 0.95
    lam: float = 0.95
    norm: str = "mean_std_norm"
    eps: float = 1e-6
    unbiased: bool = True
    episode_singleton: str = "zero"
    norm_over: str = "rows"
    step_weight: ScheduleConfig = field(default_factory=ScheduleConfig)  # GiGPO's ω, per iteration
    dynamic_sampling: bool = False  # DAPO: drop task groups whose episode scores are all equal
    # How an episode's rows share its advantage A^E (grpo, gigpo; docs/algorithms.md (E1)-(E3)): episode (once per
    # episode, every row gets it), rows (statistics over the group's rows) or inverse_length (rows weighted n̄/n).
    episode_weighting: str = "episode"
    combine: str = "sum"  # gigpo: sum, A^E + ω·A^S (G8), or blend, α·A^E + (1 − α)·A^S (G10)
    alpha: ScheduleConfig | None = None  # the blend's α per iteration (combine=blend only)


@dataclass
class LoraConfig:
    rank: int = 0  # 0: full fine-tuning
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class KLConfig:
    coef: float = 0.0  # 0: no reference model
    estimator: str = "k3"  # k1 (log-ratio) or k3 (low-variance, always >= 0)


@dataclass
class ActorConfig:
    lr: float = 1e-6
    # The learning rate over the run's optimizer steps: a linear warmup from 0 over `warmup_steps` steps, then
    # `lr_schedule` (constant, or linear or cosine decay to `min_lr_ratio` x lr at the run's last step).
    warmup_steps: int = 0
    lr_schedule: str = "constant"
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    max_grad_norm: float = 1.0
    ppo_epochs: int = 1
    minibatches: int = 1  # optimizer steps per epoch (the batch's rows are shuffled and split)
    micro_batch_size: int = 8  # rows per forward pass on each rank (gradients accumulate over micro-batches)
    # Old log-probs: False takes the first minibatch's from its own forward (one epoch only) and scores only the
    # other rows apart; True scores every row in a pass of its own first (the way earlier versions did).
    score_every_row: bool = False
    layout: str = "step"  # step (one row per step) or trajectory (conversation prompting: one row per episode)
    policy_loss: str = "per_action"  # a name of pyagentrl.ops.POLICY_LOSSES: per_action or token
    clip_low: float = 0.2
    clip_high: float | None = 0.28
    loss_agg_mode: str = "token-mean"
    kl: KLConfig = field(default_factory=KLConfig)
    entropy_coef: float = 0.0
    lora: LoraConfig = field(default_factory=LoraConfig)
    deepspeed: str = "zero2.json"  # a file of train/deepspeed/ or a path
    # bf16 compute: on GPUs DeepSpeed's bf16 mode, on CPUs torch.autocast (fp32 weights and optimizer, bf16
    # matmuls: the main job's iteration 1.6x faster on a CPU with AMX, benchmarks/RESULTS.md). auto: where the
    # hardware has it.
    bf16: str = "auto"
    gradient_checkpointing: bool = False


@dataclass
class EvalConfig:
    """Scoring on held-out tasks inside `pyagentrl train`: the untrained policy before the first update and the
    trained policy after the last, on the same tasks, written to ``<run>/eval.json``."""

    tasks: int = 0  # held-out tasks (one episode each); 0: no scoring
    temperature: float | None = None  # None: the run's rollout temperature (0: greedy)
    untrained: bool = True  # also score the untrained policy
    greedy: bool = True  # also score each policy greedily (temperature 0), under "greedy" in its entry
    baselines: bool = True  # also a random mover and the best blind sequence on the same tasks, under "baselines"


@dataclass
class CheckpointConfig:
    every: int = 0  # iterations between checkpoints (0: only at the end)
    keep: int = 2  # newest checkpoints kept (0: all)


@dataclass
class TrainConfig:
    name: str = "run"
    output_dir: str = "runs"
    seed: int = 0
    iterations: int = 3
    model: str = "embedded"  # embedded, tiny or an HF model directory
    threads: int | None = None  # torch threads per rank (default: torch's)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    anchors: AnchorConfig = field(default_factory=AnchorConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


class ConfigError(ValueError):
    """A bad config: the message names the key."""


def _omegaconf() -> Any:
    try:
        import omegaconf
    except ImportError as exc:
        raise ImportError(f"training needs omegaconf: pip install 'pyagentrl[train]' ({exc})") from exc
    return omegaconf


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """The YAML file at ``path`` over the defaults, then ``key=value`` overrides; checked against the schema.

    A relative ``actor.deepspeed`` that is not a file is looked up in ``train/deepspeed/`` (next to the config's
    own directory), and stored as an absolute path.
    """
    omegaconf = _omegaconf()
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist (the configs are in train/configs/)")
    schema = omegaconf.OmegaConf.structured(TrainConfig)
    import yaml  # OmegaConf's parser: a malformed file raises its error, not OmegaConf's

    try:
        merged = omegaconf.OmegaConf.merge(schema, omegaconf.OmegaConf.load(file))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file} is not valid YAML: {' '.join(str(exc).split())}") from None
    except omegaconf.errors.OmegaConfBaseException as exc:
        raise ConfigError(f"{file}: {_first_line(exc)} (key {_full_key(exc)})") from None
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        try:
            merged = _apply_override(omegaconf, merged, item)
        except omegaconf.errors.OmegaConfBaseException as exc:
            raise ConfigError(f"override {item!r}: {_first_line(exc)} (key {_full_key(exc)})") from None
    config: TrainConfig = omegaconf.OmegaConf.to_object(merged)
    config.actor.bf16 = str(config.actor.bf16).lower()  # YAML reads `true` as a boolean; the field is a word
    config.actor.deepspeed = str(_find_deepspeed(config.actor.deepspeed, file.resolve().parent))
    return config


def _apply_override(omegaconf: Any, merged: Any, item: str) -> Any:
    """``key=value`` over ``merged``. A mapping given for a free-form mapping (``env.options``, ``anchors.options``,
    ``rollout.engine_options``) replaces it, so that another environment's options do not inherit the old ones;
    ``env.options.size=5`` changes one entry. Anything else merges, checked against the schema."""
    conf = omegaconf.OmegaConf
    parsed = conf.from_dotlist([item])
    key = item.split("=", 1)[0]
    value, current = conf.select(parsed, key), conf.select(merged, key)
    free_form = isinstance(current, omegaconf.DictConfig) and conf.get_type(current) is dict
    if free_form and isinstance(value, omegaconf.DictConfig):
        conf.update(merged, key, value, merge=False)
        return merged
    return conf.merge(merged, parsed)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0]


def _full_key(exc: Any) -> str:
    return str(getattr(exc, "full_key", None) or "?")


def _find_deepspeed(name: str, config_dir: Path) -> Path:
    given = Path(name).expanduser()
    # Next to the config first: a run directory's config.yaml names its own copy, "deepspeed.json".
    for candidate in (config_dir / given, given, config_dir.parent / DEEPSPEED_DIR / given):
        if candidate.is_file():
            return candidate.resolve()
    raise ConfigError(f"actor.deepspeed={name!r}: no such file (looked in {config_dir}, . and train/deepspeed/)")


def to_yaml(config: TrainConfig) -> str:
    omegaconf = _omegaconf()
    return str(omegaconf.OmegaConf.to_yaml(omegaconf.OmegaConf.structured(config)))


def save_config(config: TrainConfig, path: Path) -> None:
    path.write_text(to_yaml(config))


def optimizer_steps(config: TrainConfig) -> int:
    """The optimizer steps of a whole run, as the learning-rate schedule counts them."""
    return config.iterations * config.actor.ppo_epochs * config.actor.minibatches


def validate(config: TrainConfig, world_size: int = 1) -> None:
    """Raises ConfigError naming the key of the first setting that cannot work, before any work is done."""
    from pyagentrl.envs import ENVS
    from pyagentrl.hashing.keyer import MODES as ANCHOR_MODES
    from pyagentrl.ops import ADV_ESTIMATORS, LOSS_AGG_MODES, POLICY_LOSSES
    from pyagentrl.rollout import ENGINES

    def need(ok: bool, key: str, message: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {message}")

    env, rollout, alg, actor = config.env, config.rollout, config.algorithm, config.actor
    need(config.iterations >= 1, "iterations", f"must be >= 1, got {config.iterations}")
    need(config.seed >= 0, "seed", f"must be >= 0, got {config.seed}")
    need(config.threads is None or config.threads >= 1, "threads", f"must be >= 1, got {config.threads}")
    need(env.name in ENVS, "env.name", f"unknown environment {env.name!r}; expected one of {sorted(ENVS)}")
    need(env.backend in ("thread", "process", "serial"), "env.backend", f"unknown backend {env.backend!r}")
    need(env.num_groups >= 1, "env.num_groups", f"must be >= 1, got {env.num_groups}")
    need(env.group_size >= 1, "env.group_size", f"must be >= 1, got {env.group_size}")
    need(
        env.num_groups % world_size == 0,
        "env.num_groups",
        f"{env.num_groups} task groups do not divide over {world_size} ranks (task groups stay whole on one rank)",
    )
    need(rollout.engine in ENGINES, "rollout.engine", f"unknown engine {rollout.engine!r}; expected one of {ENGINES}")
    need(rollout.prompting in ("window", "conversation"), "rollout.prompting", f"unknown {rollout.prompting!r}")
    need(rollout.turn_format in ("full", "compact"), "rollout.turn_format", f"unknown {rollout.turn_format!r}")
    need(
        rollout.answer_format in ("reason", "direct"),
        "rollout.answer_format",
        f"expected reason or direct, got {rollout.answer_format!r}",
    )
    need(rollout.max_new_tokens >= 1, "rollout.max_new_tokens", f"must be >= 1, got {rollout.max_new_tokens}")
    need(
        rollout.temperature > 0 and math.isfinite(rollout.temperature),
        "rollout.temperature",
        f"must be > 0 to train, got {rollout.temperature} (greedy replies have no sampling distribution for the "
        "importance ratio; evaluate greedily with eval.temperature=0 instead)",
    )
    need(0 < rollout.top_p <= 1, "rollout.top_p", f"must lie in (0, 1], got {rollout.top_p}")
    modes = ANCHOR_MODES
    need(config.anchors.mode in modes, "anchors.mode", f"unknown anchor mode {config.anchors.mode!r}; expected {modes}")
    need(
        alg.estimator in ADV_ESTIMATORS,
        "algorithm.estimator",
        f"unknown estimator {alg.estimator!r}; registered: {sorted(ADV_ESTIMATORS)}",
    )
    need(
        not (alg.estimator in ("gigpo", "gagpo") and env.group_size < 2),
        "env.group_size",
        f"{alg.estimator} compares the rollouts of a task group: group_size must be >= 2, got {env.group_size}",
    )
    schedules = ("constant", "linear", "cosine")
    sw = alg.step_weight
    need(sw.schedule in schedules, "algorithm.step_weight.schedule", f"unknown {sw.schedule!r}; expected {schedules}")
    need(sw.iterations >= 0, "algorithm.step_weight.iterations", f"must be >= 0, got {sw.iterations}")
    if alg.alpha is not None:  # the blend's α schedule: its values lie between start and end, each in [0, 1]
        al = alg.alpha
        need(al.schedule in schedules, "algorithm.alpha.schedule", f"unknown {al.schedule!r}; expected {schedules}")
        need(
            0 <= al.iterations <= config.iterations,
            "algorithm.alpha.iterations",
            f"must lie in [0, iterations={config.iterations}] (a schedule longer than the run never reaches its "
            f"end), got {al.iterations}",
        )
        need(0 <= al.start <= 1, "algorithm.alpha.start", f"must lie in [0, 1], got {al.start}")
        need(0 <= al.end <= 1, "algorithm.alpha.end", f"must lie in [0, 1], got {al.end}")
    need(actor.lr > 0, "actor.lr", f"must be > 0, got {actor.lr}")
    need(
        actor.lr_schedule in schedules,
        "actor.lr_schedule",
        f"unknown schedule {actor.lr_schedule!r}; expected {schedules}",
    )
    need(0 <= actor.min_lr_ratio <= 1, "actor.min_lr_ratio", f"must lie in [0, 1], got {actor.min_lr_ratio}")
    steps = optimizer_steps(config)
    need(
        0 <= actor.warmup_steps < steps,
        "actor.warmup_steps",
        f"must lie in [0, {steps}) (the run makes {steps} optimizer steps: iterations x ppo_epochs x minibatches), "
        f"got {actor.warmup_steps}",
    )
    need(actor.ppo_epochs >= 1, "actor.ppo_epochs", f"must be >= 1, got {actor.ppo_epochs}")
    need(actor.micro_batch_size >= 1, "actor.micro_batch_size", f"must be >= 1, got {actor.micro_batch_size}")
    rows = env.num_groups * env.group_size  # at least one row per episode
    need(
        1 <= actor.minibatches <= rows,
        "actor.minibatches",
        f"must lie in [1, {rows}] (the {rows} episodes of an iteration give at least {rows} rows), "
        f"got {actor.minibatches}",
    )
    need(actor.max_grad_norm > 0, "actor.max_grad_norm", f"must be > 0, got {actor.max_grad_norm}")
    need(len(actor.betas) == 2, "actor.betas", f"must hold two numbers, got {actor.betas}")
    need(actor.layout in ("step", "trajectory"), "actor.layout", f"unknown layout {actor.layout!r}")
    need(
        actor.layout == "step" or rollout.prompting == "conversation",
        "actor.layout",
        "'trajectory' needs rollout.prompting=conversation",
    )
    need(
        actor.policy_loss in POLICY_LOSSES,
        "actor.policy_loss",
        f"unknown policy loss {actor.policy_loss!r}; registered: {sorted(POLICY_LOSSES)}",
    )
    trainable_modes = tuple(m for m in LOSS_AGG_MODES if m != "seq-mean-token-sum-norm")
    need(
        actor.loss_agg_mode in trainable_modes,
        "actor.loss_agg_mode",
        f"expected one of {trainable_modes} (seq-mean-token-sum-norm divides by a padded width that changes "
        f"with each micro-batch), got {actor.loss_agg_mode!r}",
    )
    need(actor.kl.estimator in ("k1", "k3"), "actor.kl.estimator", f"expected k1 or k3, got {actor.kl.estimator!r}")
    need(actor.kl.coef >= 0, "actor.kl.coef", f"must be >= 0, got {actor.kl.coef}")
    need(actor.lora.rank >= 0, "actor.lora.rank", f"must be >= 0, got {actor.lora.rank}")
    need(actor.bf16 in ("auto", "true", "false"), "actor.bf16", f"expected auto, true or false, got {actor.bf16!r}")
    need(config.eval.tasks >= 0, "eval.tasks", f"must be >= 0, got {config.eval.tasks}")
    temperature = config.eval.temperature
    need(
        temperature is None or (temperature >= 0 and math.isfinite(temperature)),
        "eval.temperature",
        f"must be >= 0, got {temperature}",
    )
    need(config.checkpoint.every >= 0, "checkpoint.every", f"must be >= 0, got {config.checkpoint.every}")
    need(config.checkpoint.keep >= 0, "checkpoint.keep", f"must be >= 0, got {config.checkpoint.keep}")
    try:  # the model: a name or a directory that exists (building the embedded or tiny model happens later)
        if config.model not in ("embedded", "tiny"):
            from pyagentrl.rollout.models import resolve_model

            resolve_model(config.model)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise ConfigError(f"model: {exc}") from None
    # The settings the library's own constructors check; their messages start with the field's name.
    from pyagentrl.hashing import StateKeyer
    from pyagentrl.ops import AdvantageConfig, LossConfig

    try:
        StateKeyer(mode=config.anchors.mode, **config.anchors.options)  # type: ignore[arg-type]
    except (TypeError, ValueError, ImportError, FileNotFoundError) as exc:  # the last two: embedding's model
        raise ConfigError(f"anchors.options: {exc}") from None
    try:
        advantage = AdvantageConfig(
            gamma=alg.gamma,
            lam=alg.lam,
            norm=alg.norm,  # type: ignore[arg-type]
            eps=alg.eps,
            unbiased=alg.unbiased,
            episode_singleton=alg.episode_singleton,  # type: ignore[arg-type]
            norm_over=alg.norm_over,  # type: ignore[arg-type]
            # ω's first value other than 1 over the run, if any: combine=blend refuses it
            step_weight=next((w for w in map(sw.at, range(config.iterations)) if w != 1.0), 1.0),
            episode_weighting=alg.episode_weighting,  # type: ignore[arg-type]
            combine=alg.combine,  # type: ignore[arg-type]
            alpha=None if alg.alpha is None else alg.alpha.start,
        )
        # The estimator itself refuses what it has no use for (e.g. gagpo and episode_weighting): try it on a tiny
        # batch, so that such a config stops here rather than at the first iteration's advantages.
        from pyagentrl.synthetic import make_step_batch

        ADV_ESTIMATORS[alg.estimator](make_step_batch(2, 2, steps=(1, 3), response_len=1), advantage)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"algorithm.{exc}") from None
    try:
        LossConfig(actor.clip_low, actor.clip_high, actor.loss_agg_mode)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"actor.{exc}") from None
    try:
        ds = json.loads(Path(actor.deepspeed).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"actor.deepspeed: {actor.deepspeed} is not a readable JSON file ({exc})") from None
    stage = ds.get("zero_optimization", {}).get("stage", 0) if isinstance(ds, dict) else None
    need(
        stage in (0, 1, 2),
        "actor.deepspeed",
        f"ZeRO stage {stage} in {actor.deepspeed}: the trainer supports stages 0-2 (stage 3 partitions the "
        "weights, which the weight sync and the hand-set accumulation boundary do not handle yet)",
    )
