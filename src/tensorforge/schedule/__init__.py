"""tensorforge.schedule: how to loop (API.md §2)."""

from tensorforge.schedule.schedule import Schedule, create_schedule
from tensorforge.schedule.stage import Stage


def auto_inline(s: Schedule) -> Schedule:
    """Inline every injective stage into its consumers (automatic operator fusion)."""
    from tensorforge.schedule.auto_inline import auto_inline as _auto_inline

    return _auto_inline(s)


__all__ = ["Schedule", "Stage", "create_schedule", "auto_inline"]
