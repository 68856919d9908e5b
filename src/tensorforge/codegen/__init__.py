"""tensorforge.codegen."""
