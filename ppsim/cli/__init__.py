"""The ``ppsim`` command line: ``commands`` holds the commands, ``common`` what they share with ``ppexec``'s."""

from ppsim.cli.commands import app


def main() -> None:
    app()


__all__ = ["app", "main"]
