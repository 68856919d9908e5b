"""Traversal helpers for loop IR (the generic implementation lives in te.visit)."""

from tensorforge.te.substitute import substitute
from tensorforge.te.visit import children, map_children, rewrite, rewrite_top_down, walk

__all__ = ["children", "map_children", "rewrite", "rewrite_top_down", "walk", "substitute"]
