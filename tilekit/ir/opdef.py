"""Op definitions: each op declared once, as data.

An ``OpDef`` names its operands (``"mask?"`` optional, ``"inits*"``
variadic), says which effects it has, infers (and thereby checks) its result
types from its operand types and attributes, and carries its reference
semantics as a numpy function. The builder, the verifier, the printer and the
interpreter all read the same ``OpDef``; nothing about an op is written twice.

``infer`` raises ``OpTypeError`` with a plain message; the tracer turns that
into a ``TraceError`` at the user's line and the verifier into an
``IRError``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tilekit.ir.types import Type
from tilekit.record import Frozen

if TYPE_CHECKING:
    from tilekit.ir.core import Operation


class OpTypeError(Exception):
    """An op's operands or attributes do not fit its definition."""


class Effect(enum.Flag):
    PURE = 0
    READ = enum.auto()  # reads global memory
    WRITE = enum.auto()  # writes global memory
    CONTROL = enum.auto()  # has regions that run conditionally or repeatedly


class Arity(enum.Enum):
    ONE = ""
    OPTIONAL = "?"
    VARIADIC = "*"


class OperandSpec(Frozen):
    __slots__ = ("name", "arity")
    name: str
    arity: Arity

    @staticmethod
    def parse(text: str) -> OperandSpec:
        for arity in (Arity.OPTIONAL, Arity.VARIADIC):
            if text.endswith(arity.value):
                return OperandSpec(text[:-1], arity)
        return OperandSpec(text, Arity.ONE)


class Signature:
    """The operand types of one op, looked up by slot name (what ``infer`` sees)."""

    def __init__(self, slots: Sequence[str], types: Sequence[Type], attrs: dict[str, Any]) -> None:
        self.slots = tuple(slots)
        self.types = tuple(types)
        self.attrs = attrs

    def __getitem__(self, slot: str) -> Type:
        return self.types[self.slots.index(slot)]

    def get(self, slot: str) -> Type | None:
        return self.types[self.slots.index(slot)] if slot in self.slots else None

    def variadic(self, slot: str) -> list[Type]:
        return [t for t, s in zip(self.types, self.slots) if s == slot]

    def attr(self, name: str) -> Any:
        try:
            return self.attrs[name]
        except KeyError:
            raise OpTypeError(f"missing attribute {name!r}") from None


InferFn = Callable[[Signature], Sequence[Type]]
ReferenceFn = Callable[..., Any]


class OpDef(Frozen):
    __slots__ = ("name", "operands", "infer", "reference", "effects", "num_regions",
                 "is_terminator", "doc", "verify", "printer")
    name: str
    operands: tuple[OperandSpec, ...]
    infer: InferFn
    reference: ReferenceFn | None
    effects: Effect
    num_regions: int
    is_terminator: bool
    doc: str
    # Structural checks beyond types (region arguments, yields); raises OpTypeError.
    verify: Callable[[Operation], None] | None
    # How the printer shows the op; None means the generic form.
    printer: Callable[..., str] | None
    _field_defaults = {"effects": Effect.PURE, "num_regions": 0, "is_terminator": False,
                       "doc": "", "verify": None, "printer": None}

    @property
    def is_pure(self) -> bool:
        return self.effects == Effect.PURE

    def check_slots(self, slots: Sequence[str]) -> None:
        """Check that ``slots`` fill this op's operand list in order."""
        i = 0
        for spec in self.operands:
            if spec.arity is Arity.ONE:
                if i >= len(slots) or slots[i] != spec.name:
                    raise OpTypeError(f"missing operand {spec.name!r}")
                i += 1
            elif spec.arity is Arity.OPTIONAL:
                if i < len(slots) and slots[i] == spec.name:
                    i += 1
            else:
                while i < len(slots) and slots[i] == spec.name:
                    i += 1
        if i != len(slots):
            raise OpTypeError(f"unexpected operand {slots[i]!r}")


REGISTRY: dict[str, OpDef] = {}


def define(
    name: str,
    operands: Sequence[str],
    infer: InferFn,
    reference: ReferenceFn | None,
    *,
    effects: Effect = Effect.PURE,
    num_regions: int = 0,
    is_terminator: bool = False,
    doc: str = "",
    verify: Callable[[Operation], None] | None = None,
    printer: Callable[..., str] | None = None,
) -> OpDef:
    """Declare an op and register it under its name."""
    if name in REGISTRY:
        raise ValueError(f"op {name!r} declared twice")
    opdef = OpDef(name, tuple(OperandSpec.parse(o) for o in operands), infer, reference,
                  effects, num_regions, is_terminator, doc, verify, printer)
    REGISTRY[name] = opdef
    return opdef


def lookup(name: str) -> OpDef:
    found = REGISTRY.get(name)
    if found is None:
        # The op table is filled by importing ``tilekit.ir.ops``, which ``tilekit.ir``
        # no longer does eagerly (a launch from a portfolio never builds an op).
        import tilekit.ir.ops  # noqa: F401

        found = REGISTRY[name]
    return found


def infer_types(opdef: OpDef, slots: Sequence[str], types: Sequence[Type],
                attrs: dict[str, Any]) -> list[Type]:
    """Check an op's operands and attributes against its definition; its result types."""
    opdef.check_slots(slots)
    return list(opdef.infer(Signature(slots, types, attrs)))
