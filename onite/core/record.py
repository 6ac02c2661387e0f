"""``Record``: the base of onite's immutable values, a collections.namedtuple made from its class's annotations
(typing.NamedTuple compiles every string annotation: a fifth of a millisecond a class, forty at each start).
"""

from __future__ import annotations

from collections import namedtuple


class _Fields(type):
    def __new__(mcls, name: str, bases: tuple, body: dict):
        if not bases:  # Record itself
            return super().__new__(mcls, name, bases, body)
        fields = list(body.get("__annotations__", {}))
        has_default = [field in body for field in fields]
        if has_default != sorted(has_default):  # namedtuple would give the defaults to the last fields
            raise TypeError(f"{name}: a field without a default follows one with a default")
        defaults = [body.pop(field) for field in fields if field in body]
        tuple_type = namedtuple(name, fields, defaults=defaults, module=body["__module__"])
        body.setdefault("__slots__", ())
        return type(name, (tuple_type,), body)  # an ordinary class: its subclasses are ordinary ones


class Record(metaclass=_Fields):
    """Subclassed as typing.NamedTuple is: each field annotated, those with a default last."""
