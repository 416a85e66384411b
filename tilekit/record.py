"""Immutable records: declared like ``typing.NamedTuple`` or a frozen dataclass, cheap to create.

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

A ``Frozen`` is the same declaration for values that must not be tuples: the IR's types and
op definitions (the IR printer and CSE read tuple attributes as sequences, and two records
of different classes with equal items are equal tuples). It is what
``@dataclass(frozen=True)`` gave them (equality and hashing within its class, no
assignment, a repr), without the ~0.5 ms a dataclass costs to create: a warm start traces
its kernel, and imports the IR to do so. Its fields are its ``__slots__``::

    class Pair(Frozen):
        __slots__ = ("first", "second")
        first: int
        second: int = 0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter, itemgetter
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
    _default_tail: ClassVar[tuple[Any, ...]] = ()

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
        cls._default_tail = tuple(defaults.values())  # the trailing fields' defaults
        cls.__match_args__ = cls._fields

    def __new__(cls: type[R], *args: Any, **kwargs: Any) -> R:
        # positional arguments, the trailing defaults for the fields they leave out: the
        # common calls (the launch's slow path makes a dozen records), kept inline
        missing = len(cls._fields) - len(args)
        if kwargs or missing:
            tail = cls._default_tail
            args = args + tail[-missing:] if not kwargs and 0 < missing <= len(tail) \
                else _bind(cls, args, kwargs)
        return tuple.__new__(cls, args)

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


F = TypeVar("F", bound="Frozen")
_set = object.__setattr__  # a frozen value's fields are set once, in __init__


class Frozen:
    """An immutable object whose fields are its ``__slots__`` (module docstring): equal to
    another of its class with equal fields, hashable, never assigned to after ``__init__``.
    ``replace`` makes a changed copy (``dataclasses.replace``'s part)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}
    _default_tail: ClassVar[tuple[Any, ...]] = ()
    _key: ClassVar[Callable[[Any], Any]] = staticmethod(lambda self: ())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        slots = cls.__dict__.get("__slots__")
        if slots is None or isinstance(slots, str):
            raise TypeError(f"{cls.__name__} must name its fields in a tuple `__slots__`")
        if not slots:
            return  # methods only (or no fields at all): the parent's fields
        if cls._fields:
            raise TypeError(f"{cls.__name__} adds fields to {cls.__mro__[1].__name__}: "
                            "declare all of a value's fields in one class")
        annotations = _own_annotations(cls)
        missing = [name for name in slots if name not in annotations]
        if missing:
            raise TypeError(f"{cls.__name__}: annotate its fields {', '.join(missing)}")
        # defaults: a `_field_defaults` dict (a class attribute named like a slot is refused)
        defaults = dict(cls.__dict__.get("_field_defaults", {}))
        seen_default = False
        for name in slots:
            if name in defaults:
                seen_default = True
            elif seen_default:
                raise TypeError(f"{cls.__name__}: field {name!r} has no default but "
                                "follows a field that has one")
        cls._fields = tuple(slots)
        cls._field_defaults = defaults
        cls._default_tail = tuple(defaults.values())  # the trailing fields' defaults
        get = attrgetter(*slots)  # one field: the value itself, not a 1-tuple
        cls._key = staticmethod(get if len(slots) > 1 else lambda self: (get(self),))
        cls.__match_args__ = cls._fields

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        missing = len(self._fields) - len(args)
        if kwargs or missing:  # as Record.__new__
            tail = self._default_tail
            args = args + tail[-missing:] if not kwargs and 0 < missing <= len(tail) \
                else _bind(type(self), args, kwargs)
        for name, value in zip(self._fields, args):
            _set(self, name, value)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(self._key(self) == other._key(other))  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.__class__.__name__, self._key(self)))

    def __setattr__(self, name: str, value: Any) -> None:
        # dataclasses' error, as the frozen dataclasses these replace raised (imported
        # here: `import tilekit` without torch does not load dataclasses otherwise)
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r} of a "
                                  f"{type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r} of a {type(self).__name__}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), tuple(getattr(self, name) for name in self._fields))

    def replace(self: F, **changes: Any) -> F:
        values = [changes.pop(name, getattr(self, name)) for name in self._fields]
        if changes:
            raise TypeError(f"{type(self).__name__} has no fields {', '.join(sorted(changes))}")
        return type(self)(*values)

    def __repr__(self) -> str:
        items = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({items})"


def _bind(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The positional and keyword arguments, and the defaults, in ``cls._fields``' order."""
    fields = cls._fields  # type: ignore[attr-defined]
    defaults = cls._field_defaults  # type: ignore[attr-defined]
    if len(args) > len(fields):
        raise TypeError(f"{cls.__name__}() takes {len(fields)} arguments "
                        f"({', '.join(fields)}) but {len(args)} were given")
    values = list(args)
    for name in fields[len(args):]:
        if name in kwargs:
            values.append(kwargs.pop(name))
        elif name in defaults:
            values.append(defaults[name])
        else:
            raise TypeError(f"{cls.__name__}() is missing the argument {name!r}")
    if kwargs:
        raise TypeError(f"{cls.__name__}() got unexpected or repeated arguments: "
                        f"{', '.join(sorted(kwargs))} (its fields: {', '.join(fields)})")
    return tuple(values)


def _own_annotations(cls: type) -> dict[str, Any]:
    """The annotations ``cls`` itself declares (not its bases'), unevaluated where the
    interpreter allows it (strings under ``from __future__ import annotations``)."""
    own = cls.__dict__.get("__annotations__")
    if own is None and "__annotate__" in cls.__dict__:  # Python 3.14: made on demand
        own = cls.__annotations__
    return dict(own or {})
