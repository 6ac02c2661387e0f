"""onite.core.jsontext.dumps writes exactly what json.dumps(obj, indent=1) writes (pure)."""

import json
import random

import pytest

from onite.core.jsontext import dumps

CASES = [
    {}, [], (), "text", 1, 1.5, None, True,
    {"a": []}, {"a": {}}, [[]], [{}], [[], {}], {"a": [[], {}]},
    {"x": 1, "a": [{"q": 1}], "y": 2, "z": [], "w": {"k": [1, (2, 3)]}, "v": 3},
    {"quote\"d": "new\nline\ttab \\ é ☃ \x00", "n": float("inf"), "m": -0.0},
    {1: "int key", False: "bool key", None: "null key", 2.5: [1]},
    {"version": 1, "jobs": [{"name": "a", "position": 1, "host": None}, {"name": "b", "position": 2}]},
    ({"t": (1, 2)},),
]


@pytest.mark.parametrize("obj", CASES, ids=range(len(CASES)))
def test_same_text_as_json_indent_1(obj):
    assert dumps(obj) == json.dumps(obj, indent=1)


def test_random_documents():
    rnd = random.Random(7)
    scalars = [None, True, False, 0, -3, 2**70, 0.1, "", "s", "ü\n\"", "\u2028"]

    def make(depth):
        kind = rnd.random()
        if depth > 3 or kind < 0.4:
            return rnd.choice(scalars)
        if kind < 0.7:
            return [make(depth + 1) for _ in range(rnd.randrange(4))]
        return {rnd.choice(["a", "b", "c", "d", "é"]) + str(i): make(depth + 1) for i in range(rnd.randrange(4))}

    for _ in range(500):
        obj = make(0)
        assert dumps(obj) == json.dumps(obj, indent=1)


def test_what_json_refuses_it_refuses():
    with pytest.raises(TypeError):
        dumps({"a": object()})
    with pytest.raises(TypeError):
        dumps({(1, 2): 3})
