from __future__ import annotations

import pytest

from pyagentrl.envs.parsing import ActionParser, normalize

ADMISSIBLE = ("go to fridge 1", "take apple 1 from countertop 1", "look")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<think>hungry</think><action>go to fridge 1</action>", "go to fridge 1"),
        ("<action> Go  To Fridge 1. </action>", "go to fridge 1"),
        ("<ACTION>look</ACTION>", "look"),
        ("<action>look</action> then <action>go to fridge 1</action>", "go to fridge 1"),
        ("look", "look"),
        ("  'look'  ", "look"),
        ("<action>open the door</action>", None),
        ("<action>go to fridge 1", None),  # unclosed tag: broken format
        ("", None),
        ("I would go to fridge 1", None),  # prose is not a bare command
        ("<think>ok</think>\ngo to fridge 1", "go to fridge 1"),  # reasoning, then a bare command
        ("<think>the format is <action>...</action></think> go to fridge 1", "go to fridge 1"),
        ("<think>maybe <action>look</action></think>", None),  # an action named while reasoning is no answer
        ("<action>'look'.</action>", "look"),
        ("<action>**look**</action>", "look"),
        ("<action>`go to fridge 1`.</action>", "go to fridge 1"),
    ],
)
def test_parse(reply: str, expected: str | None) -> None:
    assert ActionParser().parse(reply, ADMISSIBLE) == expected


def test_require_tag_rejects_bare_command() -> None:
    parser = ActionParser(require_tag=True)
    assert parser.parse("look", ADMISSIBLE) is None
    assert parser.parse("<action>look</action>", ADMISSIBLE) == "look"


def test_first_tag_option() -> None:
    reply = "<action>look</action><action>go to fridge 1</action>"
    assert ActionParser(last_tag=False).parse(reply, ADMISSIBLE) == "look"


def test_returns_game_spelling() -> None:
    assert ActionParser().parse("<action>UP</action>", ("Up", "Down")) == "Up"


def test_normalize() -> None:
    assert normalize('  "Take  the\nkey."  ') == "Take the key"
    assert normalize("**'look'.**.") == "look"


@pytest.mark.parametrize(
    ("reply", "named"),
    [
        ("<think>maybe <action>left</action></think> <action> go north </action>", "go north"),
        ("<action>up</action> then <action>down</action>", "down"),
        ("  look  ", "look"),
        ("<think>hmm</think> take key", "take key"),
        ("<action>open door", None),  # an unclosed tag names nothing
    ],
)
def test_span_locates_the_extracted_action(reply: str, named: str | None) -> None:
    parser = ActionParser()
    span = parser.span(reply)
    if named is None:
        assert span is None and parser.extract(reply) is None
        return
    assert span is not None and reply[span[0] : span[1]] == named
    assert normalize(reply[span[0] : span[1]]) == parser.extract(reply)
