"""tensorforge.ops."""
