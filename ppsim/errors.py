"""User-facing errors. The CLI prints ``str(error)`` as one line (plus a picture where one helps) and exits 1."""

from __future__ import annotations


class PpsimError(Exception):
    """A problem with what the user asked for; the message names the field and the fix.

    ``message`` is the text without the field, ``field`` the key or option at fault, ``detail`` a
    picture (the step x rank grid of a plan) to print under the message."""

    def __init__(self, message: str, *, field: str | None = None, detail: str | None = None) -> None:
        self.message = message
        self.field = field
        self.detail = detail
        super().__init__(f"{field}: {message}" if field else message)


class ScenarioError(PpsimError):
    """The scenario file is missing, malformed or inconsistent."""


class ScheduleError(PpsimError):
    """A schedule cannot be built for the requested stages / micro-batches / chunks."""


class PlanError(PpsimError):
    """A plan breaks an invariant; ``detail`` holds the step x rank grid with the failing spot marked."""


class TraceError(PpsimError):
    """A trace file cannot be read."""
