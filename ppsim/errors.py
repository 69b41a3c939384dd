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
        # a message that opens with its field (as a sentence of it) is not prefixed with it again
        super().__init__(f"{field}: {message}" if field and not message.startswith(field) else message)


class ScenarioError(PpsimError):
    """The scenario file is missing, malformed or inconsistent."""


class ScheduleError(PpsimError):
    """A schedule cannot be built for the requested stages / micro-batches / chunks."""


class PlanError(PpsimError):
    """A plan breaks an invariant; ``detail`` holds the step x rank grid with the failing spot marked."""


class TraceError(PpsimError):
    """A trace file cannot be read."""


def shown_path(path: object, limit: int = 80) -> str:
    """``path`` as a message shows it: quoted, and cut in the middle (with its length) when longer than ``limit``."""
    text = str(path)
    if len(text) <= limit:
        return repr(text)
    return repr(text[: limit // 2] + "..." + text[-limit // 4:]) + f" ({len(text)} characters)"


def file_error(path: object, exc: BaseException, *, writing: bool, field: str | None = None,
               kind: type[PpsimError] = PpsimError) -> PpsimError:
    """The one-line error for an OS fault on ``path`` (an OSError, or pathlib's RuntimeError for a
    symbolic link loop): what went wrong and the fix, naming ``field`` (the option or key)."""
    import errno

    name, code = shown_path(path), getattr(exc, "errno", None)
    verb = "write" if writing else "read"
    if code == errno.ENAMETOOLONG:
        why = "the name is too long for the file system; choose a shorter name or a shorter folder path"
    elif code == errno.ELOOP or (isinstance(exc, RuntimeError) and "loop" in str(exc).lower()):
        why = "a symbolic link in it points back to itself (a loop); remove the link or choose another path"
    elif code in (errno.EACCES, errno.EPERM, errno.EROFS):
        where = "its folder" if writing else "it"
        why = f"no permission to {verb} {where} ({getattr(exc, 'strerror', exc)}); choose a path you can {verb}"
    elif code == errno.ENOTDIR:
        why = "a part of the path that should be a folder is a file; fix the path"
    elif code == errno.ENOENT:
        why = ("its folder does not exist; create it first or choose another path" if writing
               else "it does not exist; check the path")
    elif code == errno.ENOSPC:
        why = "no space left on the device; free some or choose another disk"
    else:
        why = f"{getattr(exc, 'strerror', None) or exc}; choose another path"
    return kind(f"cannot {verb} {name}: {why}", field=field)
