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

import importlib.util
import json
import math
import os
import re
from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum, auto
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

DEEPSPEED_DIR = "deepspeed"  # ZeRO configs: train/deepspeed/*.json, found next to the configs directory


# Choice fields. OmegaConf refuses any other value in a YAML file or an override, naming the key and the choices;
# `validate` refuses them in a config built in Python. The values are those of the settings each choice reaches
# (the rollout's, the estimators', the keyer's): tests/training/test_config.py checks that they agree.
class Backend(StrEnum):
    thread = auto()
    process = auto()
    serial = auto()


class Engine(StrEnum):
    vllm = auto()
    hf = auto()


class Prompting(StrEnum):
    window = auto()
    conversation = auto()


class TurnFormat(StrEnum):
    full = auto()
    compact = auto()


class AnswerFormat(StrEnum):
    reason = auto()
    direct = auto()


class AnchorMode(StrEnum):
    exact = auto()
    minhash = auto()
    simhash = auto()
    embedding = auto()


class ScheduleKind(StrEnum):
    constant = auto()
    linear = auto()
    cosine = auto()


class Norm(StrEnum):
    mean_std_norm = auto()
    mean_norm = auto()
    none = auto()


class Singleton(StrEnum):
    zero = auto()
    raw = auto()


class NormOver(StrEnum):
    rows = auto()
    trajectories = auto()


class EpisodeWeighting(StrEnum):
    episode = auto()
    rows = auto()
    inverse_length = auto()


class Combine(StrEnum):
    sum = auto()
    blend = auto()


class KLEstimator(StrEnum):
    k1 = auto()
    k3 = auto()


class Layout(StrEnum):
    step = auto()
    trajectory = auto()


class WandbMode(StrEnum):
    online = auto()
    offline = auto()
    disabled = auto()


@dataclass
class EnvSection:
    name: str = "frozenlake"  # a name of pyagentrl.envs.ENVS
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the environment
    num_groups: int = 4  # task groups per iteration, over all ranks
    group_size: int = 4  # rollouts per task (GiGPO's N)
    backend: Backend = Backend.thread  # EnvBatch's: threads, spawned worker processes, or one after another
    workers: int | None = None  # threads or processes (default: EnvBatch's)


@dataclass
class RolloutSection:
    engine: Engine = Engine.vllm  # vLLM in process, or HF generate
    engine_options: dict[str, Any] = field(default_factory=dict)  # e.g. dtype, kv_cache_gib, max_batch_size
    prompting: Prompting = Prompting.window  # window: a prompt per turn (verl-agent's); conversation: one growing chat
    turn_format: TurnFormat = TurnFormat.full  # conversation's later turns: whole prompts, or compact ones
    history_length: int = 2  # window prompting: the (observation, action) pairs each prompt repeats
    invalid_action_penalty: float = 0.1  # subtracted from the step reward of a reply that names no valid action
    temperature: float = 1.0  # sampling temperature (> 0 to train; the learner's log-probs follow it)
    top_p: float = 1.0  # nucleus sampling (the learner's log-probs follow it too)
    max_new_tokens: int = 64  # per reply
    stop: list[str] = field(default_factory=list)  # strings that end a reply (kept in it)
    system_prompt: str | None = None  # default: the environment family's own
    answer_format: AnswerFormat = AnswerFormat.reason  # reason: <think> then <action> (verl-agent's); direct
    response_prefix: str = ""  # prefilled start of every reply, e.g. "<action>" (with stop ["</action>"])


@dataclass
class AnchorSection:
    mode: AnchorMode = AnchorMode.exact  # how observations become anchor states (pyagentrl.hashing.StateKeyer)
    options: dict[str, Any] = field(default_factory=dict)  # other StateKeyer settings: threshold, k, model, ...
    time_aware: bool = False  # rows share an anchor only at the same step (rollout.RolloutConfig.time_aware_anchors)


@dataclass
class Schedule:
    """A value that moves from ``start`` to ``end`` over ``iterations`` iterations, then stays at ``end``."""

    schedule: ScheduleKind = ScheduleKind.constant  # constant (always start), linear or cosine
    start: float = 1.0  # the value at iteration 0
    end: float = 1.0  # the value from iteration `iterations` on
    iterations: int = 0  # the schedule's length

    def at(self, iteration: int) -> float:
        if self.schedule == "constant" or self.iterations <= 0:
            return self.start if self.schedule == "constant" else self.end
        t = min(iteration / self.iterations, 1.0)
        if self.schedule == "linear":
            return self.start + (self.end - self.start) * t
        return self.end + (self.start - self.end) * (1 + math.cos(math.pi * t)) / 2


@dataclass
class AlgorithmSection:
    estimator: str = "gigpo"  # a name of pyagentrl.ops.ADV_ESTIMATORS: grpo, gigpo, gagpo, or one you register
    gamma: float = 0.95  # discount of the step returns
    lam: float = 0.95  # GAGPO's λ (GAE)
    norm: Norm = Norm.mean_std_norm  # the group normalisation; none: GAGPO only
    eps: float = 1e-6  # added to the std before dividing
    unbiased: bool = True  # the std with n - 1
    episode_singleton: Singleton = Singleton.zero  # a task group of one episode: zero, or its raw score (verl's)
    norm_over: NormOver = NormOver.rows  # GAGPO's final normalisation: over step rows, or each trajectory equally
    step_weight: Schedule = field(default_factory=Schedule)  # GiGPO's ω, per iteration
    dynamic_sampling: bool = False  # DAPO: drop task groups whose episode scores are all equal
    # How an episode's rows share its advantage A^E (grpo, gigpo; docs/algorithms.md (E1)-(E3)): episode (once per
    # episode, every row gets it), rows (statistics over the group's rows) or inverse_length (rows weighted n̄/n).
    episode_weighting: EpisodeWeighting = EpisodeWeighting.episode
    combine: Combine = Combine.sum  # gigpo: sum, A^E + ω·A^S (G8), or blend, α·A^E + (1 − α)·A^S (G10)
    alpha: Schedule | None = None  # the blend's α per iteration (combine=blend only)


@dataclass
class LoraSection:
    rank: int = 0  # 0: full fine-tuning
    alpha: float = 32.0  # LoRA's scaling numerator (scale alpha / rank)
    dropout: float = 0.0  # on the adapter's input
    target_modules: list[str] = field(  # the linear layers that get an adapter
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class KLSection:
    coef: float = 0.0  # 0: no reference model
    estimator: KLEstimator = KLEstimator.k3  # k1 (log-ratio) or k3 (low-variance, always >= 0, clamped)


@dataclass
class ActorSection:
    lr: float = 1e-6  # AdamW's peak learning rate
    # The learning rate over the run's optimizer steps: a linear warmup from 0 over `warmup_steps` steps, then
    # `lr_schedule` (constant, or linear or cosine decay to `min_lr_ratio` x lr at the run's last step).
    warmup_steps: int = 0
    lr_schedule: ScheduleKind = ScheduleKind.constant
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0  # AdamW's (decoupled)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW's
    max_grad_norm: float = 1.0  # gradients clipped to this norm before each step
    ppo_epochs: int = 1  # passes over each batch
    minibatches: int = 1  # optimizer steps per epoch (the batch's rows are shuffled and split)
    micro_batch_size: int = 8  # rows per forward pass on each rank (gradients accumulate over micro-batches)
    # Old log-probs: False takes the first minibatch's from its own forward (one epoch only) and scores only the
    # other rows apart; True scores every row in a pass of its own first (the way earlier versions did).
    score_every_row: bool = False
    layout: Layout = Layout.step  # step: one row per step; trajectory: one row per episode (conversation prompting)
    policy_loss: str = "per_action"  # a name of pyagentrl.ops.POLICY_LOSSES: per_action or token
    clip_low: float = 0.2  # the ratio's clip range below 1
    clip_high: float | None = 0.28  # above 1 (None: clip_low; DAPO's clip-higher when larger)
    loss_agg_mode: str = "token-mean"  # verl's aggregation: token-mean, seq-mean-token-sum, seq-mean-token-mean, ...
    kl: KLSection = field(default_factory=KLSection)  # a KL penalty to the initial model
    entropy_coef: float = 0.0  # an entropy bonus (subtracted from the loss)
    lora: LoraSection = field(default_factory=LoraSection)  # a LoRA adapter instead of full fine-tuning
    deepspeed: str = "zero2.json"  # a file of train/deepspeed/ or a path
    # bf16 compute: on GPUs DeepSpeed's bf16 mode, on CPUs torch.autocast (fp32 weights and optimizer, bf16
    # matmuls: the main job's iteration 1.6x faster on a CPU with AMX, benchmarks/RESULTS.md). auto: where the
    # hardware has it; true or false.
    bf16: str = "auto"
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less memory, more time)


@dataclass
class EvalSection:
    """Scoring on held-out tasks inside `pyagentrl train`: the untrained policy before the first update and the
    trained policy after the last, on the same tasks, written to ``<run>/eval.json``."""

    tasks: int = 0  # held-out tasks (one episode each); 0: no scoring
    temperature: float | None = None  # None: the run's rollout temperature (0: greedy)
    untrained: bool = True  # also score the untrained policy
    greedy: bool = True  # also score each policy greedily (temperature 0), under "greedy" in its entry
    baselines: bool = True  # also a random mover and the best blind sequence on the same tasks, under "baselines"


@dataclass
class CheckpointSection:
    every: int = 0  # iterations between checkpoints (0: only at the end)
    keep: int = 2  # newest checkpoints kept (0: all)


@dataclass
class LoggingSection:
    """Where each iteration's metrics go besides ``metrics.jsonl`` and TensorBoard (always written): Weights & Biases,
    which gets the run's config and, per iteration, the numbers TensorBoard gets (docs/training.md)."""

    wandb: bool = False  # also log to a W&B run (needs the wandb package: pip install 'pyagentrl[wandb]')
    wandb_project: str = "pyagentrl"  # the W&B project
    wandb_entity: str | None = None  # the W&B user or team (None: your default entity)
    # online, offline (files only, in <run>/wandb/: upload later with `wandb sync`) or disabled; None: W&B's own
    # default, which follows the WANDB_MODE environment variable
    wandb_mode: WandbMode | None = None
    wandb_tags: list[str] = field(default_factory=list)  # tags of the W&B run


@dataclass
class TrainConfig:
    name: str = "run"  # the run directory is <output_dir>/<name>-<time>
    output_dir: str = "runs"  # where run directories are made
    seed: int = 0  # every random choice of the run derives from it (pyagentrl.training.seeding)
    iterations: int = 3  # rollout + update cycles
    model: str = "embedded"  # embedded, tiny or an HF model directory
    threads: int | None = None  # torch threads per rank (default: torch's)
    # Let the model directory's own Python code run (HF's trust_remote_code), for architectures transformers and vLLM
    # do not ship: only for a model you trust. Never taken from a stored config: resuming a run or evaluating a
    # checkpoint turns it on only when that command line asks again.
    trust_remote_code: bool = False
    env: EnvSection = field(default_factory=EnvSection)  # the environment and the batch of task groups
    rollout: RolloutSection = field(default_factory=RolloutSection)  # the engine, prompting and sampling
    anchors: AnchorSection = field(default_factory=AnchorSection)  # the state keys
    algorithm: AlgorithmSection = field(default_factory=AlgorithmSection)  # the advantage estimator
    actor: ActorSection = field(default_factory=ActorSection)  # the update: optimizer, loss, DeepSpeed, LoRA
    eval: EvalSection = field(default_factory=EvalSection)  # held-out scores in the run
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)  # when to save, how many to keep
    logging: LoggingSection = field(default_factory=LoggingSection)  # W&B beside metrics.jsonl and TensorBoard


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
        loaded = omegaconf.OmegaConf.load(file)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file} is not valid YAML: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError as exc:  # YAML files are UTF-8 text
        raise ConfigError(f"{file} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:  # unreadable, or a lone scalar (OmegaConf raises OSError for one)
        raise ConfigError(f"{file}: {exc}") from None
    if not isinstance(loaded, omegaconf.DictConfig):
        raise ConfigError(f"{file} holds a list, not a mapping of settings (key: value lines)")
    try:
        merged = omegaconf.OmegaConf.merge(schema, loaded)
    except omegaconf.errors.OmegaConfBaseException as exc:
        raise ConfigError(_schema_error(exc, f"in {file}")) from None
    except TypeError as exc:  # a list where a mapping goes, or the reverse: OmegaConf's message names no key
        raise ConfigError(f"{_clash(omegaconf, schema, loaded)}: {exc} (in {file})") from None
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        key, value = item.split("=", 1)
        try:
            merged = _apply_override(omegaconf, merged, item)
        except omegaconf.errors.OmegaConfBaseException as exc:
            raise ConfigError(_schema_error(exc, f"override {item!r}")) from None
        except yaml.YAMLError as exc:  # OmegaConf parses the value as YAML: `iterations=[` stops here
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"{key}: {value!r} is not a valid value ({problem}) (override {item!r})") from None
        except TypeError as exc:  # e.g. a list for a mapping: `env.options=[1]`
            raise ConfigError(f"{key}: {exc} (override {item!r})") from None
    config: TrainConfig = omegaconf.OmegaConf.to_object(merged)
    config.actor.bf16 = str(config.actor.bf16).lower()  # YAML reads `true` as a boolean; the field is a word
    config.actor.deepspeed = str(_find_deepspeed(config.actor.deepspeed, file.resolve().parent))
    return config


def load_run_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """The config a run was made with (``<run_dir>/config.yaml``), then ``overrides``: what resuming it trains.
    ``trust_remote_code`` is off unless an override turns it on: a stored file does not get to run a model's code."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"--resume {run_dir}: no config.yaml there (is it a run directory?)")
    return load_stored_config(path, overrides)


def load_stored_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """A config a run or checkpoint stored (``config.yaml``), then ``overrides``, with ``trust_remote_code`` off
    unless an override sets it, and engine options only from the engines' known lists (:func:`validate`'s check)."""
    config = load_config(path, overrides)
    if not any(item.split("=", 1)[0].strip() == "trust_remote_code" for item in overrides):
        config.trust_remote_code = False
    _check_engine_options(config.rollout)
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


def _clash(omegaconf: Any, schema: Any, loaded: Any) -> str:
    """The dotted key where ``loaded`` puts a list in place of a mapping or the reverse ("a key" if none is found)."""

    def walk(want: Any, given: Any, prefix: str) -> str | None:
        if isinstance(want, dict) and isinstance(given, dict):
            found = (walk(want[k], v, f"{prefix}{k}.") for k, v in given.items() if k in want)
            return next((key for key in found if key), None)
        clash = isinstance(want, dict | list) and isinstance(given, dict | list) and type(want) is not type(given)
        return prefix.rstrip(".") if clash else None

    plain = omegaconf.OmegaConf.to_container
    return walk(plain(schema, resolve=False), plain(loaded, resolve=False), "") or "a key"


def _schema_error(exc: Exception, where: str) -> str:
    """OmegaConf's error in one line that starts with the key, as `validate`'s do; a value a choice field does not
    offer reads as `validate` words it."""
    first = str(exc).splitlines()[0]
    key = getattr(exc, "full_key", None)
    if not key:
        return f"{first} ({where})"
    refused = re.match(r"Invalid value '(.*)', expected one of", first)
    choice = _choice_at(key)
    if refused and choice is not None:
        return f"{_unknown_choice(key, refused.group(1), choice)} ({where})"
    return f"{key}: {first} ({where})"


def _choice_at(key: str) -> type[StrEnum] | None:
    """The choice enum of the schema field at dotted ``key`` (None when it is not a choice field)."""
    kind: Any = TrainConfig
    for part in key.split("."):
        hints = get_type_hints(kind) if isinstance(kind, type) and is_dataclass(kind) else {}
        if part not in hints:
            return None
        kind = _named_class(hints[part])
    return kind if isinstance(kind, type) and issubclass(kind, StrEnum) else None


def _named_class(hint: Any) -> type | None:
    """The class a field's type hint names (``X`` for ``X`` and for ``X | None``), or None."""
    return next((k for k in (hint, *getattr(hint, "__args__", ())) if isinstance(k, type)), None)


def _unknown_choice(key: str, value: object, choice: type[StrEnum]) -> str:
    return f"{key}: unknown {key.rsplit('.', 1)[-1]} {value!r}; expected one of {', '.join(choice)}"


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


def to_dict(config: TrainConfig) -> dict[str, Any]:
    """The config as plain nested dicts, lists and scalars (choices as their names): what ``config.yaml`` holds."""
    omegaconf = _omegaconf()
    container = omegaconf.OmegaConf.to_container(omegaconf.OmegaConf.structured(config), enum_to_str=True)
    return dict(container)


def optimizer_steps(config: TrainConfig) -> int:
    """The optimizer steps of a whole run, as the learning-rate schedule counts them."""
    return config.iterations * config.actor.ppo_epochs * config.actor.minibatches


def validate(config: TrainConfig, world_size: int = 1) -> None:
    """Raises ConfigError naming the key of the first setting that cannot work, before any work is done."""
    from pyagentrl.ops import ADV_ESTIMATORS, LOSS_AGG_MODES, POLICY_LOSSES

    def need(ok: bool, key: str, message: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {message}")

    _check_choices(config)  # a config built in Python has not met OmegaConf's check of the choice fields
    env, rollout, alg, actor = config.env, config.rollout, config.algorithm, config.actor
    _check_scalars(config)  # types, and finite floats: nan and inf pass or fail comparisons by accident
    _check_run(config)
    _check_env(env)
    _check_rollout(rollout)
    _check_algorithm(alg)
    _check_actor(actor)
    _check_eval(config.eval)
    need(config.threads is None or config.threads >= 1, "threads", f"must be >= 1, got {config.threads}")
    if config.logging.wandb:  # located, not imported: importing it is the logger's business, and only when it is on
        need(
            importlib.util.find_spec("wandb") is not None,
            "logging.wandb",
            "needs the wandb package: pip install 'pyagentrl[wandb]' (or pip install wandb)",
        )
        need(bool(config.logging.wandb_project), "logging.wandb_project", "must not be empty")
    need(env.num_groups >= 1, "env.num_groups", f"must be >= 1, got {env.num_groups}")
    need(env.group_size >= 1, "env.group_size", f"must be >= 1, got {env.group_size}")
    need(
        env.num_groups % world_size == 0,
        "env.num_groups",
        f"{env.num_groups} task groups do not divide over {world_size} ranks (task groups stay whole on one rank)",
    )
    need(rollout.max_new_tokens >= 1, "rollout.max_new_tokens", f"must be >= 1, got {rollout.max_new_tokens}")
    need(
        rollout.temperature > 0 and math.isfinite(rollout.temperature),
        "rollout.temperature",
        f"must be > 0 to train, got {rollout.temperature} (greedy replies have no sampling distribution for the "
        "importance ratio; evaluate greedily with eval.temperature=0 instead)",
    )
    need(0 < rollout.top_p <= 1, "rollout.top_p", f"must lie in (0, 1], got {rollout.top_p}")
    _check_engine_options(rollout)
    parallel = rollout.engine_options.get("tensor_parallel_size", 1)
    need(
        rollout.engine != "vllm" or world_size == 1 or parallel == 1,
        "rollout.engine_options.tensor_parallel_size",
        f"{parallel} on {world_size} trainer ranks: each rank's vLLM engine is built in the trainer's process group "
        "(external_launcher) and plays that rank's own task groups, while tensor parallelism needs every rank of a "
        "group to send the same prompts; use 1, or one trainer process (vLLM then starts its own workers)",
    )
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
    sw = alg.step_weight
    need(sw.iterations >= 0, "algorithm.step_weight.iterations", f"must be >= 0, got {sw.iterations}")
    if alg.alpha is not None:  # the blend's α schedule: its values lie between start and end, each in [0, 1]
        al = alg.alpha
        need(
            0 <= al.iterations <= config.iterations,
            "algorithm.alpha.iterations",
            f"must lie in [0, iterations={config.iterations}] (a schedule longer than the run never reaches its "
            f"end), got {al.iterations}",
        )
        need(0 <= al.start <= 1, "algorithm.alpha.start", f"must lie in [0, 1], got {al.start}")
        need(0 <= al.end <= 1, "algorithm.alpha.end", f"must lie in [0, 1], got {al.end}")
    need(actor.lr > 0, "actor.lr", f"must be > 0, got {actor.lr}")
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
    from pyagentrl.ops import LossConfig

    try:
        StateKeyer(mode=config.anchors.mode, **config.anchors.options)  # type: ignore[arg-type]
    except (TypeError, ValueError, ImportError, FileNotFoundError) as exc:  # the last two: embedding's model
        raise ConfigError(f"anchors.options: {exc}") from None
    try:
        from pyagentrl.training.settings import advantage_config

        # An iteration whose ω is not 1, if any: combine=blend refuses such an ω. ω moves monotonically from
        # start to end, so if it is 1 at both the first and the last iteration it is 1 throughout.
        first = next((i for i in (0, config.iterations - 1) if sw.at(i) != 1.0), 0)
        advantage = advantage_config(config, first)
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
    _check_deepspeed(ds, actor, world_size)


def _check_engine_options(rollout: RolloutSection) -> None:
    """``rollout.engine_options`` holds only what the chosen engine takes from a config (a closed list)."""
    from pyagentrl.rollout import check_engine_options

    try:
        check_engine_options(rollout.engine, rollout.engine_options)
    except ValueError as exc:
        raise ConfigError(f"rollout.engine_options.{exc}") from None


def derived_batch_settings(actor: ActorSection, world_size: int) -> dict[str, int]:
    """The DeepSpeed batch settings the trainer derives and fills in itself."""
    return {
        "train_micro_batch_size_per_gpu": actor.micro_batch_size,
        "gradient_accumulation_steps": 1,  # micro-batches per minibatch vary; the learner sets the boundary by hand
        "train_batch_size": actor.micro_batch_size * world_size,
    }


#: The keys of :func:`derived_batch_settings`.
DERIVED_DEEPSPEED_KEYS = tuple(derived_batch_settings(ActorSection(), 1))


def recorded_deepspeed(ds_config: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed config as a run directory keeps it: without the batch sizes the trainer derives, so that the
    copy fits any number of ranks and micro-batch size it is reused with."""
    return {key: value for key, value in ds_config.items() if key not in DERIVED_DEEPSPEED_KEYS}


def _check_deepspeed(ds: Any, actor: ActorSection, world_size: int) -> None:
    """A ZeRO JSON the trainer can run on ``world_size`` ranks: a stage 0-3, batch settings that agree with those the
    trainer sets, and sub-groups of ranks (hpZ, MiCS) that divide the world."""
    name = f"actor.deepspeed: {actor.deepspeed}"
    if not isinstance(ds, dict) or not isinstance(ds.get("zero_optimization", {}), dict):
        raise ConfigError(f"{name} is not a DeepSpeed config (a JSON object with a zero_optimization object)")
    zero = ds.get("zero_optimization", {})
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"{name} sets ZeRO stage {stage!r}; expected one of 0, 1, 2, 3")
    for key in ("fp16", "torch_autocast"):  # bf16 is filled in from actor.bf16
        if isinstance(ds.get(key), dict) and ds[key].get("enabled"):
            raise ConfigError(f"{name} enables {key}: the trainer sets the precision itself (actor.bf16)")
    for key, value in derived_batch_settings(actor, world_size).items():
        if key in ds and ds[key] not in (value, "auto"):
            raise ConfigError(
                f"{name} sets {key}={ds[key]!r}, which does not fit actor.micro_batch_size={actor.micro_batch_size} "
                f"on {world_size} rank(s) (the trainer sets it to {value}): remove it"
            )
    for key in ("zero_hpz_partition_size", "mics_shard_size"):
        size = zero.get(key)
        if size is not None and (not isinstance(size, int) or size < 1 or world_size % size):
            raise ConfigError(
                f"{name} sets zero_optimization.{key}={size!r}, which does not divide {world_size} rank(s)"
            )


def _check_choices(section: Any, prefix: str = "") -> None:
    """Raises ConfigError for a choice field (a StrEnum) of ``section`` or its subsections that holds another value."""
    hints = get_type_hints(type(section))
    for f in fields(section):
        value, key = getattr(section, f.name), prefix + f.name
        if is_dataclass(value):
            _check_choices(value, key + ".")
            continue
        choice = _named_class(hints[f.name])
        if choice is not None and issubclass(choice, StrEnum) and value is not None and value not in set(choice):
            raise ConfigError(_unknown_choice(key, value, choice))


# Bounds `validate` derives from where the values go.
#: Seeds lie below 2^32: the vLLM engine reseeds NumPy's global generator with the run's seed, and
#: ``numpy.random.seed`` takes 32-bit seeds only (the seeds derived from it, `seeding`, take any size).
SEED_LIMIT = 2**32
#: Checkpoints are named ``iter_NNNNNN`` (`checkpoint.checkpoint_name`) and pruned in name order: six digits.
MAX_ITERATIONS = 999_999
#: Held-out task seeds are ``2^30 + k`` (`seeding.EVAL_SEED_BASE`); they stay below 2^31, the games' largest seed
#: (TextWorldExpress takes a Java int).
MAX_EVAL_TASKS = 2**30
#: The run directory is ``<name>-YYYYmmdd-HHMMSS[-N]``, one file name (at most 255 bytes on Linux file systems).
MAX_NAME_BYTES = 255 - len("-YYYYmmdd-HHMMSS-NNN")


def _need(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {message}")


#: What a scalar field must hold, in words; floats must also be finite.
_SCALARS = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}


def _check_scalars(section: Any, prefix: str = "") -> None:
    """Every bool, int, float and str field of ``section`` and its subsections (also ``X | None`` and ``list[X]``)
    holds a value of its type, and every float is finite. OmegaConf checks the types of a YAML file and overrides,
    not of a config built in Python; and a nan compares false with every bound, an inf passes lower bounds."""
    hints = get_type_hints(type(section))
    for f in fields(section):
        value, key = getattr(section, f.name), prefix + f.name
        if is_dataclass(value):
            _check_scalars(value, key + ".")
            continue
        hint = hints[f.name]
        arms = (hint, *get_args(hint))
        kind = next((k for k in _SCALARS if k in arms), None)
        if kind is None or get_origin(hint) is dict or (value is None and type(None) in arms):
            continue
        many = get_origin(hint) is list
        values = value if many and isinstance(value, list) else [value]
        fits = (not many or isinstance(value, list)) and all(_holds(v, kind) for v in values)
        _need(fits, key, f"must be {'a list, each ' if many else ''}{_SCALARS[kind]}, got {value!r}")


def _holds(value: Any, kind: type) -> bool:
    if kind is bool or isinstance(value, bool):  # YAML's true is no number
        return isinstance(value, bool) and kind is bool
    if kind is float:
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, kind)


def _check_run(config: TrainConfig) -> None:
    """The run's name, directory, seed and length."""
    name = config.name
    plain = name not in ("", ".", "..") and not set(name) & {"/", "\\", "\0"}
    _need(plain, "name", f"must be a plain directory name (no '/', not '.' or '..'), got {name!r}")
    size = len(name.encode("utf-8", "surrogateescape"))
    _need(size <= MAX_NAME_BYTES, "name", f"must be at most {MAX_NAME_BYTES} bytes (with the time, one file name)")
    problem = directory_problem(Path(config.output_dir))
    _need(problem is None, "output_dir", f"{config.output_dir!r} cannot hold run directories: {problem}")
    seed = config.seed
    _need(0 <= seed < SEED_LIMIT, "seed", f"must lie in [0, 2^32 - 1] (vLLM seeds NumPy with it), got {seed}")
    _need(
        1 <= config.iterations <= MAX_ITERATIONS,
        "iterations",
        f"must lie in [1, {MAX_ITERATIONS}] (checkpoint names hold six digits), got {config.iterations}",
    )


def directory_problem(path: Path) -> str | None:
    """Why run directories cannot be made under ``path`` (None when they can): it, or the nearest folder above it
    that exists, is a file or not writable."""
    for folder in (path, *path.parents):
        try:
            if not folder.exists():
                continue
        except OSError as exc:
            return str(exc)
        if not folder.is_dir():
            return f"{folder} is a file, not a directory"
        return None if os.access(folder, os.W_OK | os.X_OK) else f"{folder} is not writable"
    return None


def _check_env(env: EnvSection) -> None:
    """The environment's name, workers and options: the options as the family's constructor would take them,
    checked without starting a game (`pyagentrl.envs.check_env_options`)."""
    from pyagentrl.envs import ENVS, EnvOptionError, check_env_options

    _need(env.name in ENVS, "env.name", f"unknown environment {env.name!r}; expected one of {sorted(ENVS)}")
    _need(env.workers is None or env.workers >= 1, "env.workers", f"must be >= 1, got {env.workers}")
    try:
        check_env_options(env.name, env.options)
    except EnvOptionError as exc:
        where = f"env.options.{exc.option}" if exc.option else "env.options"
        raise ConfigError(f"{where}: {exc.problem}") from None
    except ImportError as exc:  # the family's optional package
        raise ConfigError(f"env.name: {env.name} needs a package that is not installed ({exc})") from None


def _check_rollout(rollout: RolloutSection) -> None:
    _need(rollout.history_length >= 0, "rollout.history_length", f"must be >= 0, got {rollout.history_length}")
    penalty = rollout.invalid_action_penalty
    _need(penalty >= 0, "rollout.invalid_action_penalty", f"must be >= 0 (< 0 pays for no action), got {penalty}")
    bad = [s for s in rollout.stop if not isinstance(s, str) or not s]
    _need(not bad, "rollout.stop", f"stop strings must be non-empty (an empty one ends every reply), got {bad[:1]}")


def _check_algorithm(alg: AlgorithmSection) -> None:
    sw = alg.step_weight
    for key, value in (("start", sw.start), ("end", sw.end)):  # ω weighs A^S: below 0 it favours the worse action
        _need(value >= 0, f"algorithm.step_weight.{key}", f"must be >= 0, got {value}")


def _check_actor(actor: ActorSection) -> None:
    _need(actor.weight_decay >= 0, "actor.weight_decay", f"must be >= 0, got {actor.weight_decay}")
    betas = actor.betas
    _need(all(0 <= b < 1 for b in betas), "actor.betas", f"each must lie in [0, 1) (AdamW's), got {betas}")
    lora = actor.lora  # checked with rank 0 too: a config that says dropout 5 means something it does not get
    _need(lora.alpha > 0, "actor.lora.alpha", f"must be > 0 (the adapter's scale is alpha / rank), got {lora.alpha}")
    _need(0 <= lora.dropout < 1, "actor.lora.dropout", f"must lie in [0, 1), got {lora.dropout}")
    modules = lora.target_modules
    named = bool(modules) and all(isinstance(m, str) and m for m in modules)
    _need(named, "actor.lora.target_modules", f"must name at least one module, got {modules}")


def _check_eval(section: EvalSection) -> None:
    _need(
        section.tasks <= MAX_EVAL_TASKS,
        "eval.tasks",
        f"must be <= 2^30 (held-out task seeds 2^30 + k stay below 2^31), got {section.tasks}",
    )
