"""What an export gives back: the files a framework reads, the line that shows every layer is
placed, notes on what the framework does its own way, and the command that uses the files; or,
when the framework cannot run the plan as ppsim predicts it, one line for each reason."""

from __future__ import annotations

from dataclasses import dataclass, field

from ppsim.errors import PpsimError


@dataclass(frozen=True)
class Export:
    framework: str
    files: dict[str, str]  #: name suffix (after the scenario's stem) -> the file's text
    check: str  #: every block placed once, the embedding and the head where ppsim placed them
    usage: list[str]  #: how to run the files, one line each
    notes: list[str] = field(default_factory=list)  #: what the framework does its own way, and assumed defaults


#: how each framework is named in what an export says
DISPLAY = {"megatron": "Megatron-LM", "torchtitan": "torchtitan", "deepspeed": "DeepSpeed"}


class CannotExport(PpsimError):
    """The framework cannot run this plan as ppsim predicts it: each reason one line with its fix."""

    def __init__(self, framework: str, reasons: list[str]) -> None:
        self.reasons = reasons
        framework = DISPLAY.get(framework, framework)
        if len(reasons) == 1:
            super().__init__(f"{framework} cannot run this plan as predicted: {reasons[0]}", field="--to")
        else:
            super().__init__(f"{framework} cannot run this plan as predicted, for {len(reasons)} reasons:",
                             field="--to", detail="\n".join(f"  - {r}" for r in reasons))


class Refusals:
    """The reasons gathered while an exporter walks a plan (raised together at its end)."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self.reasons: list[str] = []

    def add(self, reason: str) -> None:
        self.reasons.append(reason)

    def check(self) -> None:
        if self.reasons:
            raise CannotExport(self.framework, self.reasons)
