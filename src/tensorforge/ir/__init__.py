"""tensorforge.ir."""
