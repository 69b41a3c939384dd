"""``run.json``: everything a rank needs, whoever launches it (ppexec, torchrun, srun, deepspeed)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ppexec.typecheck import misfits
from ppsim.errors import PpsimError
from ppsim.inputs.scenario import Scenario, parse_scenario
from ppsim.plan import Plan

RUN_FORMAT = "ppexec-run"


@dataclass(frozen=True)
class RunSpec:
    scenario: Scenario  #: as run: its partition explicit, its send semantics the runtime's
    plan: Plan  #: lowered
    partition: list[int]  #: blocks per virtual stage
    runtime: str  #: "deepspeed" | "torch"
    world_size: int
    steps: int = 3
    warmup: int = 1
    seed: int = 1234
    lr: float = 1e-3
    timeout_s: float = 60.0
    backend: str = "gloo"
    save_params: bool = False
    mode: str = "train"  #: "profile": the ranks also measure layer times and the link
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def profiling(self) -> bool:
        return self.mode == "profile"

    def write(self, run_dir: Path) -> None:
        doc = asdict(self)
        doc.update(format=RUN_FORMAT, scenario=self.scenario.model_dump(exclude_none=True), plan=self.plan.to_dict())
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
        bad = misfits(cls, doc, skip=("scenario", "plan"))
        unknown = sorted(set(doc) - {f.name for f in fields(cls)})
        if bad or unknown or not isinstance(doc.get("scenario"), dict) or not isinstance(doc.get("plan"), dict):
            wrong = bad + [f"{k} (unknown)" for k in unknown] + [
                f"{k} (missing or not an object)" for k in ("scenario", "plan") if not isinstance(doc.get(k), dict)]
            raise PpsimError(f"{path} is damaged or not ppexec's: {', '.join(wrong)}; write it again with "
                             "`ppexec prepare`")
        doc["scenario"] = parse_scenario(doc["scenario"], source=str(path))
        try:
            doc["plan"] = Plan.from_dict(doc["plan"])
        except PpsimError as exc:
            raise PpsimError(f"{path}: its plan: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a plan document damaged past its checks
            raise PpsimError(f"{path}: its plan is damaged ({type(exc).__name__}: {exc}); write it again with "
                             "`ppexec prepare`") from None
        return cls(**doc)
