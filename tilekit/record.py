"""Immutable records for the runtime: declared like ``typing.NamedTuple``, cheap to create.

A fresh process that launches a prebuilt kernel creates some twenty record classes at
import (a portfolio's variants, a compiled kernel's slots, the device's properties...).
``collections.namedtuple`` compiles a constructor for each class: ~0.1 ms a class on
Python 3.12, 3 ms of a first launch whose budget is 20 (``bench/aot_start.py``); a
``typing.NamedTuple`` costs more, a dataclass ~0.5 ms. A ``Record`` declares its fields as
annotations and shares one constructor, so a class costs ~0.01 ms::

    class Point(Record):
        __slots__ = ()  # the fields are the tuple's items: no per-instance dict
        x: int
        y: int = 0

A record is a tuple (equality, hashing, unpacking, pickling and copying as one) with
namedtuple's ``_fields``, ``_field_defaults``, ``_make``, ``_replace``, ``_asdict`` and repr.
Annotations are never evaluated (the modules use ``from __future__ import annotations``).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Any, ClassVar, TypeVar

try:  # the C descriptor namedtuple's fields use (CPython); a property is the fallback
    from collections import _tuplegetter  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    def _tuplegetter(index: int, doc: str) -> Any:  # type: ignore[misc]
        return property(itemgetter(index), doc=doc)

R = TypeVar("R", bound="Record")


class Record(tuple):  # type: ignore[type-arg]
    """A tuple whose items are named by the subclass's annotations (module docstring)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__slots__" not in cls.__dict__:
            raise TypeError(f"record {cls.__name__} must set `__slots__ = ()`: its fields are "
                            "the tuple's items, and without it each instance gets a dict")
        names = [name for name, note in _own_annotations(cls).items()
                 if not str(note).startswith(("ClassVar", "typing.ClassVar"))]
        if not names:
            return  # methods only: the parent's fields
        if cls._fields:
            raise TypeError(f"record {cls.__name__} adds fields to {cls.__mro__[1].__name__}: "
                            "declare all of a record's fields in one class")
        defaults: dict[str, Any] = {}
        for index, name in enumerate(names):
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
            elif defaults:
                raise TypeError(f"record {cls.__name__}: field {name!r} has no default but "
                                "follows a field that has one")
            setattr(cls, name, _tuplegetter(index, f"field {index}: {name}"))
        cls._fields = tuple(names)
        cls._field_defaults = defaults
        cls.__match_args__ = cls._fields

    def __new__(cls: type[R], *args: Any, **kwargs: Any) -> R:
        if kwargs or len(args) != len(cls._fields):
            args = cls._bind(args, kwargs)
        return tuple.__new__(cls, args)

    @classmethod
    def _bind(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The positional and keyword arguments, and the defaults, in field order."""
        fields = cls._fields
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__}() takes {len(fields)} arguments "
                            f"({', '.join(fields)}) but {len(args)} were given")
        values = list(args)
        for name in fields[len(args):]:
            if name in kwargs:
                values.append(kwargs.pop(name))
            elif name in cls._field_defaults:
                values.append(cls._field_defaults[name])
            else:
                raise TypeError(f"{cls.__name__}() is missing the argument {name!r}")
        if kwargs:
            raise TypeError(f"{cls.__name__}() got unexpected or repeated arguments: "
                            f"{', '.join(sorted(kwargs))} (its fields: {', '.join(fields)})")
        return tuple(values)

    @classmethod
    def _make(cls: type[R], iterable: Iterable[Any]) -> R:
        values = tuple(iterable)
        if len(values) != len(cls._fields):
            raise TypeError(f"{cls.__name__}._make expects {len(cls._fields)} items, "
                            f"got {len(values)}")
        return tuple.__new__(cls, values)

    def _replace(self: R, **changes: Any) -> R:
        values = tuple(changes.pop(name, value) for name, value in zip(self._fields, self))
        if changes:
            raise TypeError(f"{type(self).__name__} has no fields {', '.join(sorted(changes))}")
        return tuple.__new__(type(self), values)

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)  # pickle and copy rebuild through __new__(cls, *items)

    def __repr__(self) -> str:
        items = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
        return f"{type(self).__name__}({items})"


def _own_annotations(cls: type) -> dict[str, Any]:
    """The annotations ``cls`` itself declares (not its bases'), unevaluated where the
    interpreter allows it (strings under ``from __future__ import annotations``)."""
    own = cls.__dict__.get("__annotations__")
    if own is None and "__annotate__" in cls.__dict__:  # Python 3.14: made on demand
        own = cls.__annotations__
    return dict(own or {})
