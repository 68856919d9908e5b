"""Operators with side effects in AOTAutograd's graphs: a check that raises (linalg.inv's
`_linalg_check_errors` of a singular matrix), threaded through effect tokens: the graph takes
a token input, each such operator is `with_effects(token, op, *args)` returning a new token
with its result, and the graph returns the last token. At run time AOTAutograd passes None
for the token and drops the returned one. Here each such call becomes an eager step running
the operator (its check still raises for the user) that returns an empty tensor as its token;
the token input is then read by nothing, and the lowerer binds no buffer to it (a None input
was copied like a tensor: `linalg.inv` raised AttributeError from the compiled graph)."""

from __future__ import annotations

import torch

WITH_EFFECTS = getattr(torch.ops.higher_order, "with_effects", None)


def run_with_effects(op, *args, **kwargs):
    """The operator's result with an (empty) token before it, as `with_effects` returns them."""
    result = op(*args, **kwargs)
    token = torch.empty(0)
    return (token, *result) if isinstance(result, (tuple, list)) else (token, result)


def without_effect_tokens(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with each `with_effects` call made a plain call of `run_with_effects` (in place)."""
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is WITH_EFFECTS]
    if not calls:
        return gm
    for node in calls:
        _token, op, *args = node.args
        with gm.graph.inserting_before(node):
            plain = gm.graph.call_function(run_with_effects, (op, *args), dict(node.kwargs))
        plain.meta.update(node.meta)
        node.replace_all_uses_with(plain)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return gm
