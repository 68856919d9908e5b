"""tensorforge.ir.passes."""
