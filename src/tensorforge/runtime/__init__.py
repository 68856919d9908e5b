"""tensorforge.runtime."""
