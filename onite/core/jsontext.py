"""``dumps(obj)``: the text of ``json.dumps(obj, indent=1)``, at the speed of the C encoder.

``json`` indents with its pure-Python encoder; here each container of scalars is
encoded by the C encoder, with separators laid out as indenting would (tests/test_jsontext.py).
"""

from __future__ import annotations

import json

_NESTED = (dict, list, tuple)
_SCALARS = frozenset((str, int, float, bool, type(None)))
_encoders: dict[int, tuple[json.JSONEncoder, str, str]] = {}


def dumps(obj: object, *, depth: int = 0) -> str:
    """``json.dumps(obj, indent=1)``, the same text; with ``depth``, the text of ``obj`` as it
    stands that deep inside a bigger document (for a caller that assembles one)."""
    parts: list[str] = []
    _write(obj, depth, parts)
    return "".join(parts)


def _flat(depth: int) -> tuple[json.JSONEncoder, str, str]:
    """An encoder for a scalars-only container at ``depth``, and the text that opens and closes it."""
    known = _encoders.get(depth)
    if known is None:
        inner = "\n" + " " * (depth + 1)
        encoder = json.JSONEncoder(separators=("," + inner, ": "))  # no indent: the C encoder
        known = _encoders[depth] = (encoder, inner, "\n" + " " * depth)
    return known


def _write(obj: object, depth: int, parts: list[str]) -> None:
    if isinstance(obj, dict):
        if not obj:
            parts.append("{}")
            return
        encoder, opening, closing = _flat(depth)
        separator = opening[1:] and "," + opening  # between members: ",\n" and the indent
        parts.append("{" + opening)
        run: dict = {}  # consecutive scalar members, encoded in one call
        first = True
        for key, value in obj.items():
            if isinstance(value, _NESTED) and value:
                if run:
                    parts.append(("" if first else separator) + encoder.encode(run)[1:-1])
                    run, first = {}, False
                parts.append(("" if first else separator) + json.dumps(_key(key)) + ": ")
                first = False
                _write(value, depth + 1, parts)
            else:
                run[key] = value
        if run:
            parts.append(("" if first else separator) + encoder.encode(run)[1:-1])
        parts.append(closing + "}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            parts.append("[]")
        elif not any(isinstance(v, _NESTED) and v for v in obj):
            encoder, opening, closing = _flat(depth)
            parts.append("[" + opening + encoder.encode(list(obj))[1:-1] + closing + "]")
        elif all(type(v) is dict and v and _SCALARS.issuperset(map(type, v.values())) for v in obj):
            parts.append(_records(obj, depth))
        else:
            inner = "\n" + " " * (depth + 1)
            for i, value in enumerate(obj):
                parts.append(("[" if i == 0 else ",") + inner)
                _write(value, depth + 1, parts)
            parts.append("\n" + " " * depth + "]")
    else:
        parts.append(json.dumps(obj))


def _records(records: list | tuple, depth: int) -> str:
    """A list of non-empty dicts of scalars (``onite list --json``'s jobs) in one call of the C encoder.

    No encoded string holds a raw newline and no scalar ends with "}", so "}," + newline + indent + "{"
    is found only between two dicts: there the indenting encoder's braces go on lines of their own.
    """
    encoder = _flat(depth + 1)[0]
    outer, inner = " " * (depth + 1), " " * (depth + 2)
    text = encoder.encode(list(records))
    text = text[2:-2].replace("},\n" + inner + "{", "\n" + outer + "},\n" + outer + "{\n" + inner)
    return "[\n" + outer + "{\n" + inner + text + "\n" + outer + "}\n" + " " * depth + "]"


def _key(key: object) -> str:
    """A key as ``json`` writes it: strings as they are; numbers, booleans and None as their JSON text."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
