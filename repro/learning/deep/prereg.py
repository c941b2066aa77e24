"""The third study's pre-registration (``studies/preregistered_3.toml``) as typed data.

Every learning parameter, cell, arm, seed count, endpoint and the trimming order is read from the file; the
reduced study (CI: ``--reduced``) changes only steps, seeds and the cells/arms run, never a learning parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

from repro.core.errors import SuiteError
from repro.core.paths import ROOT
from repro.core.toml_file import read_toml
from repro.learning.deep.loop import SITES, LoopConfig

PREREGISTERED_3 = ROOT / "studies" / "preregistered_3.toml"
#: A cell's settings and their values in the primary cell's table (``[primary]``); a one-factor cell changes one.
SETTINGS = ("kl_site", "kl_direction", "tau", "kl_target", "aux_reward", "ema_start", "resume", "pi_hidden", "env")
DIRECTIONS = ("reverse", "forward")
EMA_STARTS = ("zero", "first")


@dataclass(frozen=True)
class Cell:
    name: str
    env: str
    kl_site: str
    kl_direction: str
    tau: float          # in units of the calibrated τ unit (Q's measured action gap)
    kl_target: float
    aux_reward: float
    ema_start: str
    resume: bool        # the EMA restarts from 0 at half the steps, λ kept
    pi_hidden: int
    arms: tuple[str, ...]
    exploratory_arms: tuple[str, ...] = ()
    exploratory: bool = False   # outside the Holm family

    @property
    def loop_key(self) -> str:
        """The batched loop the cell runs in: ``task/π hidden``."""
        return f"{self.env}/{self.pi_hidden}"


@dataclass(frozen=True)
class Endpoint:
    threshold: float     # log10 geometric agreement on the probe batch
    consecutive: int     # evaluations in a row below it, after the warm-up
    alpha: float
    correction: str      # holm
    seeds: int           # per cell
    noninferiority_return: float  # margin on the mean return (reward units): fixed − original > −margin


@dataclass(frozen=True)
class Prereg3:
    loop: LoopConfig
    beta: float
    tau_unit: float
    seed: int
    cells: tuple[Cell, ...]
    endpoint: Endpoint
    trim_order: tuple[str, ...]
    reduced: dict
    env_overrides: dict
    min_original_fraction: float
    path: str

    def loop_config(self, cell: Cell, **changes) -> LoopConfig:
        """The loop parameters of ``cell``'s loop (its task's region, its π width), with ``changes``."""
        extra = self.env_overrides.get(cell.env, {})
        return replace(self.loop, env=cell.env, pi_hidden=cell.pi_hidden, **extra, **changes)


def load(path: Path | str = PREREGISTERED_3) -> Prereg3:
    path = Path(path)
    data = read_toml(path, "pre-registration")
    try:
        loop_keys = {f.name for f in fields(LoopConfig)}
        loop = LoopConfig(**{k: v for k, v in data["loop"].items() if k in loop_keys})
        primary = data["primary"]
        base = {k: primary[k] for k in SETTINGS}
        cells = [Cell(name="primary", arms=tuple(primary["arms"]), exploratory_arms=tuple(primary.get("exploratory_arms", ())),
                      **base)]
        for c in data.get("cells", []):
            changed = {k: c[k] for k in SETTINGS if k in c}
            if len(changed) != 1:
                raise SuiteError(f"{path}: cell {c.get('name')!r} must change exactly one setting of [primary]")
            cells.append(Cell(name=c["name"], arms=tuple(c["arms"]), exploratory=bool(c.get("exploratory", False)),
                              **{**base, **changed}))
        for cell in cells:
            if cell.kl_site not in SITES or cell.kl_direction not in DIRECTIONS or cell.ema_start not in EMA_STARTS:
                raise SuiteError(f"{path}: cell {cell.name!r} has an unknown site, direction or EMA start")
        e = data["endpoint"]
        endpoint = Endpoint(e["threshold"], e["consecutive"], e["alpha"], e["correction"], e["seeds"],
                            e["noninferiority_return"])
        cal = data["calibrated"]
        names = [c.name for c in cells]
        if len(set(names)) != len(names):
            raise SuiteError(f"{path}: cell names repeat")
        loop = replace(loop, region_threshold=cal["region_threshold"])
        return Prereg3(loop, cal["beta"], cal["tau_unit"], data["study"]["seed"], tuple(cells), endpoint,
                       tuple(data["trim"]["order"]), data.get("reduced", {}), data.get("env", {}),
                       data["falsification"]["min_original_fraction"], path.resolve().relative_to(ROOT).as_posix()
                       if path.resolve().is_relative_to(ROOT) else str(path))
    except KeyError as err:
        raise SuiteError(f"{path}: missing key {err}") from None
    except (TypeError, ValueError) as err:
        raise SuiteError(f"{path}: {err}") from None
