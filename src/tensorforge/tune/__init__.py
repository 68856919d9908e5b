"""tensorforge.tune."""
