"""Bad configs stop before any work with a message that names the key; schedules follow their formulas."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import pytest
import torch
from testkit.training import CONFIGS, TINY, cli

from pyagentrl.training.config import ConfigError, Schedule, load_config, validate


def _check(*overrides: str, world_size: int = 1) -> None:
    validate(load_config(TINY, list(overrides)), world_size)


def test_the_shipped_configs_are_valid():
    gpu = CONFIGS / "gpu-1.5b.yaml"  # names a model directory these machines do not have
    for path in sorted(set(CONFIGS.glob("*.yaml")) - {gpu}):
        validate(load_config(path))
    validate(load_config(gpu, ["model=tiny"]), world_size=8)  # made for 8 GPUs (not run here)


@pytest.mark.parametrize(
    ("overrides", "key", "world_size"),
    [
        (["algorithm.estimator=ppo"], "algorithm.estimator", 1),
        (["rollout.engine=sglang"], "rollout.engine", 1),
        (["env.name=chess"], "env.name", 1),
        (["anchors.mode=bloom"], "anchors.mode", 1),
        (["env.group_size=1"], "env.group_size", 1),
        (["env.group_size=1", "algorithm.estimator=gagpo"], "env.group_size", 1),
        (["model=/no/such/model"], "model", 1),
        (["env.num_groups=3"], "env.num_groups", 2),
        (["actor.minibatches=9"], "actor.minibatches", 1),
        (["actor.micro_batch_size=0"], "actor.micro_batch_size", 1),
        (["actor.layout=trajectory"], "actor.layout", 1),
        (["actor.policy_loss=dpo"], "actor.policy_loss", 1),
        (["actor.loss_agg_mode=seq-mean-token-sum-norm"], "actor.loss_agg_mode", 1),
        (["algorithm.step_weight.schedule=exponential"], "algorithm.step_weight.schedule", 1),
        (["algorithm.gamma=1.5"], "algorithm.gamma", 1),
        (["anchors.mode=minhash", "anchors.options.threshold=2.0"], "anchors.options", 1),
        # A config the learner cannot follow or a schedule longer than the run stops before any work.
        (["rollout.temperature=0"], "rollout.temperature", 1),
        (["rollout.top_p=0"], "rollout.top_p", 1),
        (["actor.warmup_steps=6"], "actor.warmup_steps", 1),  # tiny: 3 iterations x 2 minibatches
        (["actor.lr_schedule=step"], "actor.lr_schedule", 1),
        (["actor.min_lr_ratio=2"], "actor.min_lr_ratio", 1),
        (["eval.tasks=-1"], "eval.tasks", 1),
        (["eval.temperature=-1"], "eval.temperature", 1),
    ],
)
def test_bad_settings_name_their_key(overrides, key, world_size):
    with pytest.raises(ConfigError, match=f"^{key}"):
        _check(*overrides, world_size=world_size)


def test_a_mapping_override_replaces_a_free_form_mapping():
    config = load_config(TINY, ["env.name=sokoban", "env.options={dim_room: [6, 6], num_boxes: 1}"])
    assert config.env.options == {"dim_room": [6, 6], "num_boxes": 1}  # nothing left from FrozenLake's options
    config = load_config(TINY, ["env.options.size=5"])
    assert config.env.options == {"size": 5, "max_steps": 4}  # one entry changed, the others kept
    with pytest.raises(ConfigError, match="bogus"):  # typed sections still merge and are checked
        load_config(TINY, ["env={bogus: 1}"])


def test_time_aware_anchors_reach_the_rollout():
    from pyagentrl.training.settings import rollout_config

    assert not rollout_config(load_config(TINY), None).time_aware_anchors
    assert rollout_config(load_config(TINY, ["anchors.time_aware=true"]), None).time_aware_anchors
    with pytest.raises(ConfigError, match=r"anchors\.time_aware"):
        load_config(TINY, ["anchors.time_aware=sometimes"])


def test_grpo_takes_groups_of_one():
    _check("env.group_size=1", "algorithm.estimator=grpo")


def test_unknown_keys_and_wrong_types_are_refused_with_their_name(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"actor\.learning_rate"):
        load_config(TINY, ["actor.learning_rate=1e-5"])
    with pytest.raises(ConfigError, match=r"iterations"):
        load_config(TINY, ["iterations=many"])
    with pytest.raises(ConfigError, match="not key=value"):
        load_config(TINY, ["iterations"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  nme: frozenlake\n")
    with pytest.raises(ConfigError, match=r"env\.nme"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"actor\.deepspeed"):
        load_config(TINY, ["actor.deepspeed=zero9.json"])


def test_tensor_parallel_rollouts_need_a_world_of_one():
    _check("rollout.engine=vllm", "rollout.engine_options.tensor_parallel_size=2")  # vLLM's own workers
    _check("rollout.engine=vllm", "rollout.engine_options.tensor_parallel_size=1", world_size=2)
    with pytest.raises(ConfigError, match=r"^rollout\.engine_options\.tensor_parallel_size: 2 on 2 trainer ranks"):
        _check("rollout.engine=vllm", "rollout.engine_options.tensor_parallel_size=2", world_size=2)


@pytest.mark.parametrize(
    ("deepspeed", "world_size", "message"),
    [
        ({"zero_optimization": {"stage": 4}}, 1, "sets ZeRO stage 4; expected one of 0, 1, 2, 3"),
        ([1, 2], 1, "is not a DeepSpeed config"),
        # tiny.yaml's micro_batch_size is 8: the trainer sets train_batch_size to 8 per rank.
        ({"zero_optimization": {"stage": 3}, "train_batch_size": 8}, 2, "train_batch_size=8, which does not fit"),
        ({"train_micro_batch_size_per_gpu": 4}, 1, "train_micro_batch_size_per_gpu=4, which does not fit"),
        ({"gradient_accumulation_steps": 2}, 1, "gradient_accumulation_steps=2, which does not fit"),
        ({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 3}}, 2, "hpz_partition_size=3, which does not"),
        ({"zero_optimization": {"stage": 3, "mics_shard_size": 4}}, 2, "mics_shard_size=4, which does not divide 2"),
        ({"fp16": {"enabled": True}}, 1, "enables fp16: the trainer sets the precision itself (actor.bf16)"),
        ({"torch_autocast": {"enabled": True}}, 1, "enables torch_autocast"),
    ],
)
def test_a_deepspeed_config_that_does_not_fit_stops_naming_it(tmp_path: Path, deepspeed, world_size, message):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(deepspeed))
    with pytest.raises(ConfigError, match=r"^actor\.deepspeed: .*ds\.json.*" + re.escape(message)):
        validate(load_config(TINY, [f"actor.deepspeed={path}"]), world_size=world_size)


def test_a_runs_own_deepspeed_copy_fits_other_worlds_and_micro_batches(tmp_path: Path):
    """The copy a run keeps (deepspeed.json beside its config) leaves out the batch sizes the trainer derives, so it
    can be reused, or resumed with another micro-batch size, without refusal."""
    from pyagentrl.training.config import recorded_deepspeed
    from pyagentrl.training.distributed import World
    from pyagentrl.training.learner import deepspeed_config

    config = load_config(TINY)
    filled = deepspeed_config(config.actor, World(0, 1, 0, torch.device("cpu")))
    assert filled["train_batch_size"] == config.actor.micro_batch_size
    path = tmp_path / "deepspeed.json"
    path.write_text(json.dumps(recorded_deepspeed(filled)))
    validate(load_config(TINY, [f"actor.deepspeed={path}", "actor.micro_batch_size=3"]), world_size=2)


def test_the_shipped_deepspeed_configs_and_settings_that_fit_are_accepted(tmp_path: Path):
    for name in ("zero0.json", "zero2.json", "zero3.json"):
        validate(load_config(TINY, [f"actor.deepspeed={name}"]), world_size=2)
    path = tmp_path / "ds.json"
    path.write_text(
        json.dumps({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}, "train_batch_size": 16})
    )
    validate(load_config(TINY, [f"actor.deepspeed={path}"]), world_size=2)


def test_the_command_stops_before_any_work(tmp_path: Path):
    out = cli("train", str(TINY), "algorithm.estimator=ppo", f"output_dir={tmp_path}", check=False)
    assert out.returncode == 2
    assert "algorithm.estimator: unknown estimator 'ppo'" in out.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # no run directory was made


def test_a_malformed_yaml_config_gets_one_line(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  name: [frozenlake\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml is not valid YAML: while parsing"):
        load_config(bad)
    out = cli("train", str(bad), check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("pyagentrl train: ") and "not valid YAML" in out.stderr


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_step_weight_schedules(schedule):
    s = Schedule(schedule=schedule, start=0.8, end=0.3, iterations=10)
    values = [s.at(i) for i in range(15)]
    if schedule == "constant":
        assert values == [0.8] * 15
        return
    assert values[0] == pytest.approx(0.8) and values[10:] == [pytest.approx(0.3)] * 5
    assert all(a > b for a, b in itertools.pairwise(values[:11]))  # decreasing to the end
    expected_mid = 0.55  # both schedules pass the midpoint at t = 1/2
    assert values[5] == pytest.approx(expected_mid)
    if schedule == "cosine":  # 0.3 + 0.5 (1 + cos(pi t)) * 0.5 at t = 0.2
        assert values[2] == pytest.approx(0.3 + 0.25 * (1 + math.cos(math.pi * 0.2)))
    else:
        assert values[2] == pytest.approx(0.8 - 0.5 * 0.2)


def test_learning_rate_schedules_match_torch_schedulers():
    """lr_factor against torch's own schedulers: LinearLR for the warmup, then CosineAnnealingLR or LinearLR."""
    from pyagentrl.training.learner import lr_factor

    total, warmup, low = 12, 3, 0.2

    def torch_factors(after: str) -> list[float]:
        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        sched = torch.optim.lr_scheduler
        first = sched.LinearLR(opt, start_factor=1 / (warmup + 1), end_factor=1.0, total_iters=warmup)
        span = total - 1 - warmup
        second = (
            sched.CosineAnnealingLR(opt, T_max=span, eta_min=low)
            if after == "cosine"
            else sched.LinearLR(opt, start_factor=1.0, end_factor=low, total_iters=span)
        )
        chain = sched.SequentialLR(opt, [first, second], milestones=[warmup])
        out = []
        for _ in range(total):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            chain.step()
        return out

    for after in ("cosine", "linear"):
        ours = [lr_factor(k, total, warmup, after, low) for k in range(total)]
        assert ours == pytest.approx(torch_factors(after), abs=1e-12)
        assert ours[-1] == pytest.approx(low)
    assert [lr_factor(k, total, 0, "constant", low) for k in range(total)] == [1.0] * total


def test_choice_fields_offer_exactly_the_values_their_settings_take():
    """Each choice enum of the schema against the Literal (or tuple) of the setting it reaches, so they cannot drift."""
    from typing import get_args, get_type_hints

    from pyagentrl.hashing.keyer import MODES
    from pyagentrl.ops import AdvantageConfig
    from pyagentrl.rollout import ENGINES, RolloutConfig
    from pyagentrl.rollout.batch import Layout as TokenLayout
    from pyagentrl.training import config as schema

    def values(literal) -> set[str]:
        out: set[str] = set()
        for arg in get_args(literal):
            out |= values(arg) if get_args(arg) else {arg}
        return out

    advantage, rollout = get_type_hints(AdvantageConfig), get_type_hints(RolloutConfig)
    pairs = {
        schema.Engine: set(ENGINES),
        schema.AnchorMode: set(MODES),
        schema.Prompting: values(rollout["prompting"]),
        schema.TurnFormat: values(rollout["turn_format"]),
        schema.Layout: values(TokenLayout),
        schema.Norm: values(advantage["norm"]),
        schema.Singleton: values(advantage["episode_singleton"]),
        schema.NormOver: values(advantage["norm_over"]),
        schema.EpisodeWeighting: values(advantage["episode_weighting"]),
        schema.Combine: values(advantage["combine"]),
    }
    for choice, expected in pairs.items():
        assert {str(v) for v in choice} == expected, choice.__name__


@pytest.mark.parametrize(
    ("key", "value"),
    [("rollout.prompting", "windw"), ("env.backend", "fork"), ("algorithm.step_weight.schedule", "step")],
)
def test_a_config_built_in_python_with_a_bad_choice_is_refused(key, value):
    """`validate` is the door of the Python API: a choice OmegaConf never saw is checked there, by the same enums."""
    config = load_config(TINY)
    section, _, name = key.rpartition(".")
    target = config
    for part in section.split("."):
        target = getattr(target, part)
    setattr(target, name, value)
    with pytest.raises(ConfigError, match=rf"^{key}: unknown {name} '{value}'; expected one of"):
        validate(config)


# Issue 51, item 6: settings that pass the schema but cannot train stop in `validate`, before the model loads, in
# one line that starts with the key.
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["actor.lr=inf"], "actor.lr: must be a finite number, got inf"),
        (["actor.lr=nan"], "actor.lr: must be a finite number, got nan"),
        (["actor.max_grad_norm=inf"], "actor.max_grad_norm: must be a finite number, got inf"),
        (["actor.weight_decay=nan"], "actor.weight_decay: must be a finite number, got nan"),
        (["actor.weight_decay=-0.1"], "actor.weight_decay: must be >= 0, got -0.1"),
        (["actor.entropy_coef=nan"], "actor.entropy_coef: must be a finite number, got nan"),
        (["actor.entropy_coef=-inf"], "actor.entropy_coef: must be a finite number, got -inf"),
        (["actor.kl.coef=inf"], "actor.kl.coef: must be a finite number, got inf"),
        (["actor.kl.coef=nan"], "actor.kl.coef: must be a finite number, got nan"),
        (["actor.betas=[1.0,0.999]"], "actor.betas: each must lie in [0, 1) (AdamW's), got [1.0, 0.999]"),
        (["actor.betas=[-0.1,0.999]"], "actor.betas: each must lie in [0, 1) (AdamW's), got [-0.1, 0.999]"),
        (["actor.betas=[0.9,nan]"], "actor.betas: must be a list, each a finite number, got [0.9, nan]"),
        (["actor.lora.dropout=5"], "actor.lora.dropout: must lie in [0, 1), got 5.0"),
        (["actor.lora.alpha=0"], "actor.lora.alpha: must be > 0 (the adapter's scale is alpha / rank), got 0.0"),
        (["actor.lora.alpha=nan"], "actor.lora.alpha: must be a finite number, got nan"),
        (["actor.lora.target_modules=[]"], "actor.lora.target_modules: must name at least one module, got []"),
        (["actor.clip_low=inf"], "actor.clip_low: must be a finite number, got inf"),
        (["actor.clip_high=nan"], "actor.clip_high: must be a finite number, got nan"),
        (["actor.min_lr_ratio=nan"], "actor.min_lr_ratio: must be a finite number, got nan"),
        (["algorithm.eps=inf"], "algorithm.eps: must be a finite number, got inf"),
        (["algorithm.gamma=nan"], "algorithm.gamma: must be a finite number, got nan"),
        (["algorithm.lam=2"], "algorithm.lam must lie in [0, 1], got 2.0"),
        (["algorithm.step_weight.start=inf"], "algorithm.step_weight.start: must be a finite number, got inf"),
        (["algorithm.step_weight.end=-0.5"], "algorithm.step_weight.end: must be >= 0, got -0.5"),
        (["algorithm.alpha.start=nan"], "algorithm.alpha.start: must be a finite number, got nan"),
        (["rollout.invalid_action_penalty=nan"], "rollout.invalid_action_penalty: must be a finite number, got nan"),
        (
            ["rollout.invalid_action_penalty=-1"],
            "rollout.invalid_action_penalty: must be >= 0 (< 0 pays for no action)",
        ),
        (["rollout.history_length=-1"], "rollout.history_length: must be >= 0, got -1"),
        (
            ["rollout.stop=['']"],
            "rollout.stop: stop strings must be non-empty (an empty one ends every reply), got ['']",
        ),
        (["rollout.temperature=inf"], "rollout.temperature: must be a finite number, got inf"),
        (["rollout.top_p=nan"], "rollout.top_p: must be a finite number, got nan"),
        (["eval.temperature=nan"], "eval.temperature: must be a finite number, got nan"),
        (["eval.tasks=1073741825"], "eval.tasks: must be <= 2^30 (held-out task seeds 2^30 + k stay below 2^31)"),
        (["env.workers=0"], "env.workers: must be >= 1, got 0"),
        (["env.options.bogus=1"], "env.options.bogus: unknown option of frozenlake; expected one of directions,"),
        (["env.options.size=abc"], "env.options.size: must be int, got 'abc'"),
        (["env.options.size=1"], "env.options.size: must be at least 2, got 1"),
        (["env.options.slippery=[1]"], "env.options.slippery: must be bool, got [1]"),
        (["env.options.max_steps=0"], "env.options.max_steps: must be positive, got 0"),
        (["env.name=sokoban", "env.options={dim_room: [6]}"], "env.options.dim_room: must be a list [int, int]"),
        (["seed=4294967296"], "seed: must lie in [0, 2^32 - 1] (vLLM seeds NumPy with it), got 4294967296"),
        (["seed=100000000000000000000"], "seed: must lie in [0, 2^32 - 1]"),
        (["seed=1e20"], "seed: Value '1e+20' of type 'float' could not be converted to Integer"),  # at load
        (["iterations=10000000000"], "iterations: must lie in [1, 999999] (checkpoint names hold six digits)"),
        (["name=../x"], "name: must be a plain directory name (no '/', not '.' or '..'), got '../x'"),
        (["name=a/b"], "name: must be a plain directory name"),
        (["name=.."], "name: must be a plain directory name"),
        ([f"name={'x' * 240}"], "name: must be at most 235 bytes"),
    ],
)
def test_settings_that_cannot_train_are_refused_in_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _check(*overrides)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_seed_bound_is_what_the_engine_seed_takes() -> None:
    """vLLM reseeds NumPy's global generator with the run's seed (engine option ``seed``): the last accepted seed
    is the last NumPy takes."""
    import numpy as np

    from pyagentrl.training.config import SEED_LIMIT

    _check(f"seed={SEED_LIMIT - 1}")
    np.random.seed(SEED_LIMIT - 1)
    with pytest.raises(ValueError):
        np.random.seed(SEED_LIMIT)


def test_a_run_stays_inside_output_dir_which_must_be_a_directory(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    for output_dir in (afile, afile / "below"):
        with pytest.raises(ConfigError, match=rf"^output_dir: '{re.escape(str(output_dir))}' cannot hold run dir.*"):
            _check(f"output_dir={output_dir}")
    _check(f"output_dir={tmp_path / 'new' / 'runs'}")  # made when the run starts


def test_step_weight_is_checked_where_it_leaves_1_without_walking_the_run() -> None:
    # ω is 1 at iteration 0 and leaves it later: combine=blend refuses it all the same.
    blend = ["algorithm.combine=blend", "algorithm.alpha={schedule: constant, start: 0.5}"]
    _check(*blend)
    with pytest.raises(ConfigError, match=r"^algorithm\.step_weight is the ω of combine='sum'"):
        _check(*blend, "algorithm.step_weight={schedule: linear, start: 1.0, end: 0.5, iterations: 3}")
    _check("iterations=999999", "actor.warmup_steps=0")  # the longest run: checked at once


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("seed", 1e20), "seed: must be an integer, got 1e+20"),
        (("seed", 2**40), "seed: must lie in [0, 2^32 - 1] (vLLM seeds NumPy with it), got 1099511627776"),
        (("name", 5), "name: must be a string, got 5"),
        (("env.workers", 2.5), "env.workers: must be an integer, got 2.5"),
        (("eval.greedy", "yes"), "eval.greedy: must be true or false, got 'yes'"),
        (("rollout.stop", "</action>"), "rollout.stop: must be a list, each a string, got '</action>'"),
        (("actor.lr", float("inf")), "actor.lr: must be a finite number, got inf"),
        (("rollout.top_p", "0.9"), "rollout.top_p: must be a finite number, got '0.9'"),
        (("actor.betas", [0.9, True]), "actor.betas: must be a list, each a finite number, got [0.9, True]"),
    ],
)
def test_a_config_built_in_python_meets_the_same_checks(change: tuple, message: str) -> None:
    config = load_config(TINY)
    key, value = change
    *path, name = key.split(".")
    target = config
    for part in path:
        target = getattr(target, part)
    setattr(target, name, value)
    with pytest.raises(ConfigError) as caught:
        validate(config)
    assert str(caught.value) == message


# Issue 51, item 8: a config file or an override that cannot be read is one line naming it, not a traceback.
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"name: caf\xe9\n", "is not UTF-8 text (invalid continuation byte at byte 9)"),
        (b"- 1\n- 2\n", "holds a list, not a mapping of settings (key: value lines)"),
        (b"5\n", "Invalid loaded object type: int"),
        (b"env:\n  options: [1]\n", "env.options: Cannot merge incompatible container types"),
    ],
)
def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path: Path, text: bytes, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("iterations=[", "iterations: '[' is not a valid value (did not find expected node content)"),
        ("actor.lr={", "actor.lr: '{' is not a valid value (did not find expected node content)"),
        ("name='abc", 'name: "\'abc" is not a valid value (found unexpected end of stream)'),
        ("env.options.size=[[1]", "env.options.size: '[[1]' is not a valid value (did not find expected ',' or ']')"),
        ("env.options=[1]", "env.options: Cannot merge incompatible container types (override 'env.options=[1]')"),
    ],
)
def test_a_malformed_override_value_is_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(TINY, [override])
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_shipped_study_and_testbed_specs_are_valid() -> None:
    import yaml

    from pyagentrl.testbed.spec import load_spec as load_testbed_spec
    from pyagentrl.training.study import load_spec as load_study_spec

    studies = sorted((CONFIGS.parent / "studies").glob("*.yaml"))
    specs = [p for p in studies if "arms" in yaml.safe_load(p.read_text())]  # the others are train configs
    assert len(specs) >= 2
    for path in specs:  # each validates every family x arm train config
        load_study_spec(path)
    for path in sorted(set(studies) - set(specs)):  # the train configs the studies build on
        validate(load_config(path))
    testbeds = sorted((CONFIGS.parent / "testbed").glob("*.yaml"))
    assert testbeds
    for path in testbeds:
        load_testbed_spec(path)
