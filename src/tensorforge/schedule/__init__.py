"""tensorforge.schedule: how to loop (API.md §2)."""

from tensorforge.schedule.fusion import auto_inline
from tensorforge.schedule.schedule import Schedule, create_schedule
from tensorforge.schedule.stage import Stage

__all__ = ["Schedule", "Stage", "create_schedule", "auto_inline"]
