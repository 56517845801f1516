"""Prompts in the GiGPO reference's style, history windows, chat templates (a fake tokenizer)."""

from __future__ import annotations

import pytest

from pyagentrl.envs import PromptBuilder, StepResult, apply_chat_template, render_prompt


def _result(obs: str, done: bool = False) -> StepResult:
    return StepResult(obs, obs, done=done, admissible_actions=("go north", "look"), task="find the key.")


class FakeTokenizer:
    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, enable_thinking=True):
        assert tokenize is False and add_generation_prompt is True
        end = "<|assistant|>" if enable_thinking else "<|assistant|><think></think>"
        return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + end


def test_first_prompt_has_task_observation_actions_and_format() -> None:
    text = render_prompt("alfworld", _result("You are in a room."))
    assert "Your task is to: find the key." in text
    assert "step 1" in text and "You are in a room." in text
    assert "['go north', 'look']" in text and "<action> </action>" in text and "<think>" in text
    assert "Prior to this step" not in text


def test_task_sentence_is_not_prefixed_twice() -> None:
    result = StepResult("obs", "obs", admissible_actions=("look",), task="Your task is to find the coin.")
    text = render_prompt("twx", result)
    assert "Your task is to find the coin." in text and "Your task is to: Your" not in text


def test_history_window() -> None:
    history = [(f"obs {i}", f"act {i}") for i in range(5)]
    text = render_prompt("textworld", _result("obs 5"), history, step_count=5, history_length=2)
    assert "already taken 5 step(s)" in text and "most recent 2" in text
    assert "'obs 3'" in text and "'act 4'" in text and "'obs 2'" not in text
    assert "[Observation 4:" in text and "step 6" in text


def test_builder_tracks_each_env_and_stops_at_done() -> None:
    pb = PromptBuilder("sokoban", history_length=1, system="Be brief.")
    pb.reset([_result("a0"), _result("b0")])
    replies = ["<think>hmm</think><action>look</action>", "go north"]
    pb.record(replies, [_result("a1"), _result("b1", done=True)])
    pb.record(["look", "look"], [_result("a2"), _result("b2")])
    assert pb.history == [[("a0", "look"), ("a1", "look")], [("b0", "go north")]]  # actions, not reasoning
    msgs = pb.messages()
    assert msgs[0][0] == {"role": "system", "content": "Be brief."} and "a2" in msgs[0][1]["content"]
    texts = pb.messages(FakeTokenizer())
    assert (
        isinstance(texts[0], str) and texts[0].startswith("<|system|>Be brief.") and texts[0].endswith("<|assistant|>")
    )
    assert apply_chat_template([{"role": "user", "content": "hi"}], FakeTokenizer()) == "<|user|>hi<|assistant|>"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="family"):
        PromptBuilder("chess")
    with pytest.raises(ValueError, match="history_length"):
        PromptBuilder("alfworld", history_length=-1)
    pb = PromptBuilder("alfworld")
    pb.reset([_result("a")])
    with pytest.raises(ValueError, match="actions"):
        pb.record(["x", "y"], [_result("b")])


def test_builder_keeps_parsed_action_from_env() -> None:
    pb = PromptBuilder("alfworld")
    pb.reset([_result("a0")])
    parsed = StepResult("a1", "a1", info={"action": "go to fridge 1"})
    pb.record(["<think>long reasoning</think><action>Go to Fridge 1.</action>"], [parsed])
    assert pb.history == [[("a0", "go to fridge 1")]]


def test_history_shows_observations_verbatim() -> None:
    history = [("You see a desk 1.\nYou don't see a key.", "look")]
    text = render_prompt("alfworld", _result("obs"), history, step_count=1)
    assert "[Observation 1: 'You see a desk 1.\nYou don't see a key.', Action 1: 'look']" in text
    assert "\\n" not in text and '"' not in text


def test_task_line_left_out_while_the_observation_states_it() -> None:
    first = StepResult(
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in a room.\n\nYour task is to: put a mug in desk.",
        "a",
        admissible_actions=("look",),
        task="put a mug in desk.",
    )
    text = render_prompt("alfworld", first)
    assert text.count("put a mug in desk.") == 1 and "Your task is to: put" in text  # once, in the observation
    later = StepResult("You arrive at desk 1.", "b", admissible_actions=("look",), task="put a mug in desk.")
    text = render_prompt("alfworld", later, [(first.observation, "go to desk 1")], step_count=1, history_length=0)
    assert "Your task is to: put a mug in desk." in text  # no longer on screen: the task line comes back


def test_chat_template_arguments_pass_through() -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert apply_chat_template(messages, FakeTokenizer(), enable_thinking=False).endswith("<think></think>")
    pb = PromptBuilder("frozenlake")
    pb.reset([_result("a0")])
    assert pb.messages(FakeTokenizer(), enable_thinking=False)[0].endswith("<think></think>")


def test_the_direct_answer_format_asks_for_the_action_alone():
    direct = render_prompt("frozenlake", _result("P _\n_ G"), answer_format="direct")
    reason = render_prompt("frozenlake", _result("P _\n_ G"))
    assert direct.endswith("for example <action>right</action>, and nothing else.") and "<think>" not in direct
    assert "<think> </think>" in reason
    assert direct.split("Now it's your turn")[0] == reason.split("Now it's your turn")[0]
    with pytest.raises(ValueError, match="answer_format"):
        render_prompt("frozenlake", _result("x"), answer_format="json")
    with pytest.raises(ValueError, match="answer_format"):
        PromptBuilder("frozenlake", answer_format="json")
