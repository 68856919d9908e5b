"""tensorforge.testing."""
