"""A model's own code runs only when the user's own command asks: `trust_remote_code` and the engines' option lists."""

from __future__ import annotations

import pytest
from testkit.training import TINY

from pyagentrl.rollout import ENGINE_OPTIONS, check_engine_options
from pyagentrl.training.config import ConfigError, load_config, load_stored_config, save_config, validate


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_engine_options_are_a_closed_list_without_trust_remote_code(engine):
    assert "trust_remote_code" not in ENGINE_OPTIONS[engine]
    config = load_config(TINY, [f"rollout.engine={engine}", "rollout.engine_options.trust_remote_code=true"])
    with pytest.raises(ConfigError, match=r"rollout\.engine_options\.trust_remote_code: not an engine option"):
        validate(config)
    config = load_config(TINY, [f"rollout.engine={engine}", "rollout.engine_options.load_format=pt"])
    with pytest.raises(ConfigError, match=rf"rollout\.engine_options\.load_format: not an option of engine '{engine}'"):
        validate(config)


@pytest.mark.slow  # imports vLLM
def test_each_engine_takes_every_option_on_its_list():
    """The lists name real keywords: the HF engine's constructor, and vllm.LLM's settings (its EngineArgs)."""
    import inspect

    from pyagentrl.rollout.hf_engine import HFEngine

    assert ENGINE_OPTIONS["hf"] <= set(inspect.signature(HFEngine).parameters)
    vllm = pytest.importorskip("vllm")
    from pyagentrl.rollout.vllm_engine import VLLMEngine

    accepted = set(inspect.signature(VLLMEngine).parameters) | set(vllm.EngineArgs.__dataclass_fields__)
    assert ENGINE_OPTIONS["vllm"] <= accepted, ENGINE_OPTIONS["vllm"] - accepted
    for name, known in ENGINE_OPTIONS.items():
        check_engine_options(name, dict.fromkeys(known))


def test_a_stored_config_never_turns_trust_remote_code_on(tmp_path):
    config = load_config(TINY, ["trust_remote_code=true"])
    assert config.trust_remote_code
    validate(config)  # the user's own config may ask for it
    save_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml").trust_remote_code  # the file says so...
    assert not load_stored_config(tmp_path / "config.yaml").trust_remote_code  # ...a resume or eval does not listen
    assert load_stored_config(tmp_path / "config.yaml", ["trust_remote_code=true"]).trust_remote_code
    stored = (tmp_path / "config.yaml").read_text()
    (tmp_path / "config.yaml").write_text(
        stored.replace("engine_options: {}", "engine_options: {trust_remote_code: 1}")
    )
    with pytest.raises(ConfigError, match=r"rollout\.engine_options\.trust_remote_code"):
        load_stored_config(tmp_path / "config.yaml")
