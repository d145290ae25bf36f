"""The optimizer: an ordered tuple of local rewrite rules, applied until nothing changes.

Each rule is a module with one function ``rule(op) -> LogicalOp | None`` that
looks only at a node and its direct inputs and returns ``None`` for "no
change". :func:`optimize` owns the traversal (bottom-up, to a fixed point).
"""

from __future__ import annotations

from collections.abc import Callable

from ..logical.operators import LogicalOp
from . import drop_noops, fuse_maps, push_filter, push_limit, push_projection

__all__ = ["RULES", "FINAL_RULES", "optimize", "apply_rule"]

Rule = Callable[[LogicalOp], "LogicalOp | None"]

RULES: tuple[tuple[str, Rule], ...] = (
    ("drop_noops", drop_noops.rule),
    ("push_limit", push_limit.rule),
    ("push_filter", push_filter.rule),
    ("push_projection", push_projection.rule),
)
"""Rewrites, repeated until none changes the plan."""

FINAL_RULES: tuple[tuple[str, Rule], ...] = (("fuse_maps", fuse_maps.rule),)
"""Run once after the rewrites: fusing earlier would hide maps from the push-down rules."""


def apply_rule(op: LogicalOp, rule: Rule) -> LogicalOp:
    """``rule`` applied to every node, inputs first, repeatedly at each node until it settles."""
    inputs = op.inputs
    new_inputs = tuple(apply_rule(child, rule) for child in inputs)
    if any(a is not b for a, b in zip(inputs, new_inputs, strict=True)):
        op = op.with_inputs(*new_inputs)
    for _ in range(100):
        rewritten = rule(op)
        if rewritten is None:
            return op
        op = apply_rule(rewritten, rule) if rewritten.inputs != op.inputs else rewritten
    return op


def optimize(op: LogicalOp) -> LogicalOp:
    """The plan after the :data:`RULES` reach a fixed point, then the :data:`FINAL_RULES`.

    With ``DataContext.optimizer_enabled`` False, the plan unchanged.
    """
    from ..context import DataContext

    if not DataContext.get_current().optimizer_enabled:
        return op
    for _ in range(10):
        before = op
        for _name, rule in RULES:
            op = apply_rule(op, rule)
        if op is before:
            break
    for _name, rule in FINAL_RULES:
        op = apply_rule(op, rule)
    return op
