"""Column expressions for ``filter(expr=...)`` and reads: ``col("x") > 0``, or Ray's string form ``"x > 0"``.

An :class:`Expr` wraps a pyarrow compute expression, so it is pushed into
parquet reads and evaluated by Arrow, vectorised. It adds what pyarrow's own
expressions lack and Ray's have: ``%`` and ``//`` (floored, as in Python;
computed in float64, so exact for integers up to 2**53, and ``x % 0``
is NaN, which no comparison holds), and parsing from text.

>>> import pyarrow as pa
>>> table = pa.table({"id": [0, 1, 2, 3, 4, 5], "name": ["a", "b", "c", "d", "e", "f"]})
>>> table.filter(to_arrow(col("id") % 2 == 0))["id"].to_pylist()
[0, 2, 4]
>>> table.filter(to_arrow("id <= 4 and not (name in ['b', 'c'])"))["id"].to_pylist()
[0, 3, 4]

The text form is a Python expression over column names and literals:
comparisons (chained ones too), ``and``/``or``/``not``, ``+ - * / // %``,
``x in [...]`` / ``not in``, ``x is None`` / ``is not None``. It is parsed
with :mod:`ast` and translated node by node, never evaluated as Python; any
other construct is a :class:`~airflowless.errors.ConfigError` naming it.
A column whose name is not a Python identifier is written ``col("a b")``.
"""

from __future__ import annotations

import ast
import ctypes
import operator
import re
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError

__all__ = ["Expr", "col", "columns_read", "describe", "lit", "parse", "to_arrow"]


def _scalar(value: Any) -> pc.Expression:
    """A literal as an expression. Booleans, 64-bit integers, floats and strings are built from their bytes:
    pyarrow's conversion of a Python value imports pandas (0.3 s in a fresh process), which a driver that only
    plans a filter never needs. Other values go through that conversion.

    A float is wrapped in a cast to float64: Arrow binds a bare float literal that float32 holds exactly (1.0,
    0.5) as float32 and casts an integer column to float32 to meet it, which rounds and fails past 2**24. The
    cast keeps it float64 (an integer column is cast to meet it, failing as Arrow does past 2**53; a text column
    is still an error; parquet's row-group statistics still prune).
    """
    if isinstance(value, bool):
        buffers, kind = [None, pa.py_buffer(bytes([value]))], pa.bool_()
    elif isinstance(value, int) and -2**63 <= value < 2**63:
        buffers, kind = [None, pa.py_buffer(struct.pack("=q", value))], pa.int64()
    elif isinstance(value, float):
        buffers, kind = [None, pa.py_buffer(struct.pack("=d", value))], pa.float64()
    elif isinstance(value, str):
        text = value.encode()
        buffers, kind = [None, pa.py_buffer(struct.pack("=ii", 0, len(text))), pa.py_buffer(text)], pa.string()
    else:
        return pc.scalar(value)
    literal = pc.scalar(pa.Array.from_buffers(kind, 1, buffers)[0])
    return literal.cast(pa.float64()) if isinstance(value, float) else literal


def _arrow(value: Any) -> Any:
    return value.arrow if isinstance(value, Expr) else value


def _floordiv(left: Any, right: Any) -> Any:
    return pc.floor(pc.divide(_float(left), right))


def _mod(left: Any, right: Any) -> Any:
    return pc.subtract(left, pc.multiply(_floordiv(left, right), right))


def _float(value: Any) -> Any:
    return value.cast(pa.float64()) if isinstance(value, pc.Expression) else float(value)


class Expr:
    """A column expression (see the module); combine with operators, pass to ``filter(expr=...)``."""

    __slots__ = ("arrow",)

    def __init__(self, arrow: pc.Expression) -> None:
        self.arrow = arrow

    def _op(self, fn: Callable[[Any, Any], Any], other: Any, reflected: bool = False) -> Expr:
        other = other.arrow if isinstance(other, Expr) else other if isinstance(other, pc.Expression) \
            else _scalar(other)  # a literal on the left (2 * col("x")): pyarrow's operators need it wrapped
        left, right = (other, self.arrow) if reflected else (self.arrow, other)
        return Expr(fn(left, right))

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._op(operator.eq, other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._op(operator.ne, other)

    def __lt__(self, other: Any) -> Expr:
        return self._op(operator.lt, other)

    def __le__(self, other: Any) -> Expr:
        return self._op(operator.le, other)

    def __gt__(self, other: Any) -> Expr:
        return self._op(operator.gt, other)

    def __ge__(self, other: Any) -> Expr:
        return self._op(operator.ge, other)

    def __add__(self, other: Any) -> Expr:
        return self._op(operator.add, other)

    def __radd__(self, other: Any) -> Expr:
        return self._op(operator.add, other, True)

    def __sub__(self, other: Any) -> Expr:
        return self._op(operator.sub, other)

    def __rsub__(self, other: Any) -> Expr:
        return self._op(operator.sub, other, True)

    def __mul__(self, other: Any) -> Expr:
        return self._op(operator.mul, other)

    def __rmul__(self, other: Any) -> Expr:
        return self._op(operator.mul, other, True)

    def __truediv__(self, other: Any) -> Expr:
        return self._op(lambda a, b: pc.divide(_float(a), b), other)

    def __rtruediv__(self, other: Any) -> Expr:
        return self._op(lambda a, b: pc.divide(_float(a), b), other, True)

    def __floordiv__(self, other: Any) -> Expr:
        return self._op(_floordiv, other)

    def __rfloordiv__(self, other: Any) -> Expr:
        return self._op(_floordiv, other, True)

    def __mod__(self, other: Any) -> Expr:
        return self._op(_mod, other)

    def __rmod__(self, other: Any) -> Expr:
        return self._op(_mod, other, True)

    def __neg__(self) -> Expr:
        return Expr(pc.negate(self.arrow))

    def __and__(self, other: Any) -> Expr:
        return self._op(operator.and_, other)

    def __rand__(self, other: Any) -> Expr:
        return self._op(operator.and_, other, True)

    def __or__(self, other: Any) -> Expr:
        return self._op(operator.or_, other)

    def __ror__(self, other: Any) -> Expr:
        return self._op(operator.or_, other, True)

    def __invert__(self) -> Expr:
        return Expr(~self.arrow)

    def __bool__(self) -> bool:
        raise ConfigError("a column expression has no truth value here: combine conditions with & | ~ "
                          "(not and/or/not), or write the whole condition as text: expr=\"x > 0 and y < 1\"")

    def __hash__(self) -> int:
        return hash(str(self.arrow))

    def is_in(self, values: Any) -> Expr:
        return Expr(self.arrow.isin(list(values)))

    isin = is_in

    def is_null(self) -> Expr:
        return Expr(self.arrow.is_null())

    def is_not_null(self) -> Expr:
        return Expr(self.arrow.is_valid())

    is_valid = is_not_null

    def __getattr__(self, name: str) -> Any:  # the rest of pyarrow's Expression (cast, ...), kept as Expr
        attribute = getattr(self.arrow, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*[_arrow(a) for a in args], **kwargs)
            return Expr(result) if isinstance(result, pc.Expression) else result
        return call

    def __getstate__(self) -> pc.Expression:
        return self.arrow

    def __setstate__(self, state: pc.Expression) -> None:
        self.arrow = state

    def __repr__(self) -> str:
        return str(self.arrow)


def col(name: str) -> Expr:
    """The column ``name``."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"col() takes a column name, got {name!r}")
    return Expr(pc.field(name))


def lit(value: Any) -> Expr:
    """A literal value."""
    return Expr(_scalar(value))


_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge}
_ARITHMETIC: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_HELP = ("comparisons, and/or/not, + - * / // %, `in [...]`, `is None`, column names and literals, "
         "e.g. \"trip_distance > 0 and passenger_count in [1, 2]\"")


def parse(text: str) -> Expr:
    """The expression ``text`` describes (see the module); :class:`ConfigError` for anything else."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"filter(expr={text!r}) is not an expression ({exc.msg}); write {_HELP}") from None
    result = _node(tree.body, text)
    if not isinstance(result, Expr):
        raise ConfigError(f"filter(expr={text!r}) names no column; write {_HELP}")
    return result


def _literal(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, int | float):
        return -node.operand.value
    raise ConfigError(f"filter(expr={text!r}): `in` takes a list of literals, got {ast.unparse(node)!r}")


def _node(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Name):
        return col(node.id)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BoolOp):
        values = [_condition(_node(v, text), text) for v in node.values]
        combined = values[0]
        for value in values[1:]:
            combined = combined & value if isinstance(node.op, ast.And) else combined | value
        return combined
    if isinstance(node, ast.UnaryOp):
        operand = _node(node.operand, text)
        if isinstance(node.op, ast.Not):
            return ~_condition(operand, text)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return operand
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_node(node.left, text), _node(node.right, text))
    if isinstance(node, ast.Compare):
        return _compare(node, text)
    raise ConfigError(f"filter(expr={text!r}) cannot use {ast.unparse(node)!r} ({type(node).__name__}); "
                      f"write {_HELP}")


def _compare(node: ast.Compare, text: str) -> Expr:
    parts: list[Expr] = []
    left = _node(node.left, text)
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        if isinstance(op, ast.In | ast.NotIn):
            if not isinstance(right_node, ast.List | ast.Tuple | ast.Set):
                raise ConfigError(f"filter(expr={text!r}): `in` takes a list, e.g. x in [1, 2]")
            found = _expr(left, text).is_in([_literal(e, text) for e in right_node.elts])
            parts.append(~found if isinstance(op, ast.NotIn) else found)
            right: Any = None
        elif isinstance(op, ast.Is | ast.IsNot):
            if not (isinstance(right_node, ast.Constant) and right_node.value is None):
                raise ConfigError(f"filter(expr={text!r}): `is` compares with None only")
            missing = _expr(left, text).is_null()
            parts.append(~missing if isinstance(op, ast.IsNot) else missing)
            right = None
        else:
            right = _node(right_node, text)
            if not isinstance(left, Expr) and not isinstance(right, Expr):
                raise ConfigError(f"filter(expr={text!r}) compares two literals; name a column")
            compare = _COMPARE[type(op)]
            parts.append(compare(left, right) if isinstance(left, Expr) else Expr(compare(_scalar(left), right.arrow)))
        left = right
    combined = parts[0]
    for part in parts[1:]:
        combined = combined & part
    return combined


def _expr(value: Any, text: str) -> Expr:
    if not isinstance(value, Expr):
        raise ConfigError(f"filter(expr={text!r}): `in` and `is` need a column on their left")
    return value


def _condition(value: Any, text: str) -> Expr:
    if not isinstance(value, Expr):
        raise ConfigError(f"filter(expr={text!r}): and/or/not combine conditions, got the literal {value!r}")
    return value


def to_arrow(expr: Any) -> pc.Expression:
    """A pyarrow expression from an :class:`Expr`, a pyarrow expression or Ray's text form."""
    if isinstance(expr, str):
        return parse(expr).arrow
    if isinstance(expr, Expr):
        return expr.arrow
    if isinstance(expr, pc.Expression):
        return expr
    raise ConfigError(f"expected a column expression such as col('x') > 0 or the text \"x > 0\", "
                      f"got {type(expr).__name__}")


_FLOAT_LITERAL = re.compile(
    r"cast\((-?(?:\d+(?:\.\d*)?(?:e[+-]?\d+)?|inf|nan)), \{to_type=double(?:, \w+=(?:true|false))*\}\)")


def describe(expression: Any) -> str:
    """``expression`` as pyarrow writes it, less the cast that wraps each float literal (see :func:`_scalar`).

    >>> describe(to_arrow("x > 1.5 and 7.5 // x > 0"))
    '((x > 1.5) and (floor(divide(7.5, x)) > 0))'
    """
    text, last = str(expression), ""
    while text != last:  # a cast of a cast of a literal (``//`` and ``%`` cast their left side again)
        text, last = _FLOAT_LITERAL.sub(r"\1", text), text
    return text


class _ArrowSchema(ctypes.Structure):
    """The Arrow C data interface's ``struct ArrowSchema`` (its layout is the interface's stable ABI)."""

    _fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
                ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
                ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p)]


# Python's own PyCapsule_GetPointer, typed here (not through ctypes.pythonapi's shared, retypable attribute)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _metadata_pairs(schema: pa.Schema) -> list[tuple[str, str]]:
    """``schema``'s metadata as ordered pairs, repeated keys kept (``schema.metadata`` is a dict, which drops
    them), read through the C data interface, whose metadata is: int32 count, then per pair an int32 length
    and the key's bytes, an int32 length and the value's bytes."""
    capsule = schema.__arrow_c_schema__()
    metadata = _ArrowSchema.from_address(_capsule_pointer(capsule, b"arrow_schema")).metadata
    if not metadata:
        return []

    def int32(at: int) -> int:  # in the machine's own byte order, as the interface says
        return int(struct.unpack("=i", ctypes.string_at(metadata + at, 4))[0])

    pairs, at = [], 4
    for _ in range(int32(0)):
        texts = []
        for _side in range(2):
            length = int32(at)
            texts.append(ctypes.string_at(metadata + at + 4, length).decode())
            at += 4 + length
        pairs.append((texts[0], texts[1]))
    return pairs  # the capsule, alive until here, releases the exported schema when collected


def columns_read(expression: Any) -> set[str] | None:
    """The columns ``expression`` reads (the top-level name of a nested reference), or None if it cannot be told.

    Read from Arrow's own serialised form of the expression (what pickles it): ordered pairs of schema
    metadata, ``call``/``end`` around a function's arguments, ``field_ref`` a name, ``nested_field_ref`` N
    before the N names of a path, ``literal`` and ``options`` a column of the batch. Exact for any name, where
    the printed text is not (``col("a b")``, ``col("1x")``).

    >>> sorted(columns_read(parse('x > 1.5 and name == "y"') & (col("a b") > 0)))
    ['a b', 'name', 'x']
    """
    import pyarrow.ipc

    try:
        _, (serialised,) = to_arrow(expression).__reduce__()
        pairs = _metadata_pairs(pyarrow.ipc.open_file(pa.py_buffer(serialised)).schema)
    except Exception:  # a reference by position does not serialise; a future format may differ
        return None
    columns: set[str] = set()
    path: list[str] = []  # the names of a nested reference read so far
    path_length = 0
    for key, value in pairs:
        if key == "nested_field_ref":
            if not value.isdigit():
                return None
            path, path_length = [], int(value)
        elif key == "field_ref" and len(path) < path_length:
            path.append(value)  # a name inside a path: only its first is a column
            if len(path) == 1:
                columns.add(value)
        elif key == "field_ref":
            columns.add(value)
        elif key not in ("call", "end", "literal", "options"):
            return None
    return columns
