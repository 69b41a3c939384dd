"""``run.json``: everything a rank needs, whoever launches it (ppexec, torchrun, srun, deepspeed).

A strict pydantic model: a field of the wrong type, a missing one or one ppexec does not know is
refused when the file is read, naming the field, not met deep inside a rank as a TypeError. The
scenario and the plan are read by ppsim's own readers, whose errors name their keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, ValidationError

from ppexec.runtimes import RuntimeName
from ppexec.worker.events import fields_at_fault
from ppsim.api import ModelSpec, Plan, Scenario, parse_scenario
from ppsim.errors import PpsimError

RUN_FORMAT = "ppexec-run"


class _RunSettings(BaseModel):
    """run.json's fields besides the scenario and the plan."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    partition: list[int]  #: blocks per virtual stage
    runtime: RuntimeName
    world_size: int
    steps: int = 3
    warmup: int = 1
    seed: int = 1234
    lr: float = 1e-3
    timeout_s: float = 60.0
    backend: str = "gloo"
    save_params: bool = False
    mode: str = "train"  #: "profile": the ranks also measure layer times and the link
    extra: dict[str, Any] = Field(default_factory=dict)


class _RunFile(_RunSettings):
    """run.json as read, before ppsim reads its scenario and plan."""

    scenario: dict[str, Any]
    plan: dict[str, Any]


class RunSpec(_RunSettings):
    scenario: Scenario  #: as run: its partition explicit, its send semantics the runtime's
    plan: InstanceOf[Plan]  #: lowered

    @property
    def profiling(self) -> bool:
        return self.mode == "profile"

    @property
    def model(self) -> ModelSpec:
        """The scenario's model: every run has one (``ppexec prepare`` refuses a scenario of costs only)."""
        if self.scenario.model is None:
            raise PpsimError("run.json's scenario has no 'model' section: ppexec builds the network from it; write "
                             "it again with `ppexec prepare`")
        return self.scenario.model

    def write(self, run_dir: Path) -> None:
        doc = {"scenario": self.scenario.model_dump(exclude_none=True), "plan": self.plan.to_dict(),
               **self.model_dump(exclude={"scenario", "plan"}), "format": RUN_FORMAT}
        (run_dir / "run.json").write_text(json.dumps(doc, indent=1))

    @classmethod
    def read(cls, run_dir: Path) -> RunSpec:
        """The run folder's ``run.json``; a missing, truncated or foreign file is an error naming it."""
        path = run_dir / "run.json"
        if not path.is_file():
            raise PpsimError(f"{run_dir} is not a ppexec run folder (no run.json); run `ppexec run` or `ppexec prepare`")
        try:
            doc = json.loads(path.read_bytes())
        except (ValueError, OSError) as exc:
            where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise PpsimError(f"{path} is not valid JSON{where} (truncated?); write it again with `ppexec prepare`"
                             ) from None
        if not isinstance(doc, dict) or doc.pop("format", None) != RUN_FORMAT:
            raise PpsimError(f"{path} is not a ppexec run description (its 'format' must be {RUN_FORMAT!r})")
        doc.setdefault("runtime", "deepspeed")  # run folders written before there were two runtimes
        try:
            raw = _RunFile.model_validate(doc)
        except ValidationError as exc:
            raise PpsimError(f"{path} is damaged or not ppexec's: {fields_at_fault(exc)}; write it again with "
                             "`ppexec prepare`") from None
        scenario = parse_scenario(raw.scenario, source=str(path))
        try:
            plan = Plan.from_dict(raw.plan)
        except PpsimError as exc:
            raise PpsimError(f"{path}: its plan: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a plan document damaged past its checks
            raise PpsimError(f"{path}: its plan is damaged ({type(exc).__name__}: {exc}); write it again with "
                             "`ppexec prepare`") from None
        return cls(scenario=scenario, plan=plan, **raw.model_dump(exclude={"scenario", "plan"}))
