"""Puzzle instances: seeded generation binned by the oracle's T*, and the fixed versioned sets used in reports.

An instance set is a JSON file ``metaharness/agents/environments/instances/NAME.json``::

    {"name": "sokoban_v1", "env": "sokoban", "params": {...generator...}, "bins": {"easy": 6, "hard": 10},
     "tolerance": 1, "seed": 0, "instances": [{"id": "sokoban_v1-easy-00", "env": "sokoban", "bin": "easy",
     "t_star": 6, "seed": 123, "spec": {"map": "#####..."}}, ...]}

Generation is reproducible: a master ``random.Random(seed)`` draws one seed per attempt, each attempt builds its
own ``Random(attempt_seed)``, and the instance records that seed, so any single instance can be rebuilt from its
``seed`` and the set's ``params`` alone. An instance goes to bin ``b`` when ``|T* - bins[b]| <= tolerance``.

>>> inst = load_instance_set("sokoban_v1").instances[0]
>>> make_env(inst).distance(make_env(inst).start) == inst.t_star
True
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from metaharness.agents.environments.blocksworld import BlocksWorld, generate_problem
from metaharness.agents.environments.puzzle import PuzzleEnv
from metaharness.agents.environments.sokoban import Sokoban, generate_level
from metaharness.errors import InputError
from metaharness.json_types import JSONObject


@dataclass(frozen=True)
class PuzzleInstance:
    id: str
    env: str
    bin: str
    t_star: int
    seed: int
    spec: dict[str, str]


@dataclass
class InstanceSet:
    name: str
    env: str
    params: dict[str, Any]
    bins: dict[str, int]
    tolerance: int
    seed: int
    instances: list[PuzzleInstance] = field(default_factory=list)

    def select(self, bins: list[str] | None = None, per_bin: int | None = None) -> list[PuzzleInstance]:
        """Instances of the given bins (all when ``None``), the first ``per_bin`` of each, in set order."""
        unknown = set(bins or ()) - set(self.bins)
        if unknown:
            raise InputError(
                f"Unknown bin(s) {', '.join(sorted(unknown))} in {self.name}; it has {', '.join(self.bins)}."
            )
        chosen: list[PuzzleInstance] = []
        for name in bins or list(self.bins):
            chosen += [i for i in self.instances if i.bin == name][:per_bin]
        return chosen

    def to_json(self) -> JSONObject:
        out = asdict(self)
        out["instances"] = [asdict(i) for i in self.instances]
        return out


def _sokoban_attempt(rng: random.Random, params: dict[str, Any]) -> tuple[dict[str, str], int] | None:
    made = generate_level(rng, **params)
    return None if made is None else ({"map": made[0]}, made[1])


def _blocksworld_attempt(rng: random.Random, params: dict[str, Any]) -> tuple[dict[str, str], int] | None:
    made = generate_problem(rng, **params)
    return None if made is None else ({"start": made[0][0], "goal": made[0][1]}, made[1])


# One generation attempt from an rng and a set's params: (instance spec, T*), or None when it failed.
Attempt = Callable[[random.Random, dict[str, Any]], tuple[dict[str, str], int] | None]

# env name -> (build an env from an instance spec, one generation attempt)
ENVIRONMENTS: dict[str, tuple[Callable[[dict[str, str]], PuzzleEnv], Attempt]] = {
    "sokoban": (lambda spec: Sokoban(spec["map"]), _sokoban_attempt),
    "blocksworld": (lambda spec: BlocksWorld(spec["start"], spec["goal"]), _blocksworld_attempt),
}

# The fixed sets shipped with the package; bump the version in the name whenever a parameter changes.
SET_CONFIGS: dict[str, dict[str, Any]] = {
    "sokoban_v1": {
        "env": "sokoban",
        "seed": 0,
        "tolerance": 1,
        "per_bin": 20,
        "bins": {"easy": 6, "hard": 10, "long": 14},
        "params": {"height": 7, "width": 9, "boxes": 1, "wall_prob": 0.08, "reverse_steps": [10, 60]},
    },
    "blocksworld_v1": {
        "env": "blocksworld",
        "seed": 0,
        "tolerance": 1,
        "per_bin": 20,
        "bins": {"easy": 4, "hard": 7},
        "params": {"blocks": 5},
    },
}


def make_env(instance: PuzzleInstance) -> PuzzleEnv:
    if instance.env not in ENVIRONMENTS:
        raise InputError(f"Unknown puzzle environment {instance.env!r}; known: {', '.join(ENVIRONMENTS)}.")
    return ENVIRONMENTS[instance.env][0](instance.spec)


def generate_instances(
    env: str,
    *,
    bins: dict[str, int],
    per_bin: int,
    tolerance: int = 1,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    max_attempts: int = 200_000,
    name: str | None = None,
) -> InstanceSet:
    """Generate ``per_bin`` distinct instances for every bin; raise ``InputError`` if attempts run out."""
    if env not in ENVIRONMENTS:
        raise InputError(f"Unknown puzzle environment {env!r}; known: {', '.join(ENVIRONMENTS)}.")
    params = dict(params or {})
    name = name or f"{env}_custom"
    attempt = ENVIRONMENTS[env][1]
    master = random.Random(seed)
    found: dict[str, list[PuzzleInstance]] = {b: [] for b in bins}
    seen: set[str] = set()
    for _ in range(max_attempts):
        if all(len(v) >= per_bin for v in found.values()):
            break
        attempt_seed = master.randrange(2**31)
        made = attempt(random.Random(attempt_seed), params)
        if made is None:
            continue
        spec, t_star = made
        text = json.dumps(spec, sort_keys=True)
        target = next((b for b, t in bins.items() if abs(t_star - t) <= tolerance and len(found[b]) < per_bin), None)
        if target is None or text in seen:
            continue
        seen.add(text)
        found[target].append(
            PuzzleInstance(f"{name}-{target}-{len(found[target]):02d}", env, target, t_star, attempt_seed, spec)
        )
    else:
        counts = ", ".join(f"{b}: {len(v)}" for b, v in found.items())
        raise InputError(
            f"Ran out of {max_attempts} attempts before filling every bin ({counts}); widen the "
            f"tolerance, lower per_bin or change the generator params."
        )
    return InstanceSet(name, env, params, dict(bins), tolerance, seed, [i for b in bins for i in found[b]])


def build_instance_set(name: str) -> InstanceSet:
    """Generate one of the shipped sets from its configuration in ``SET_CONFIGS``."""
    if name not in SET_CONFIGS:
        raise InputError(f"Unknown instance set {name!r}; shipped sets: {', '.join(SET_CONFIGS)}.")
    cfg = SET_CONFIGS[name]
    return generate_instances(
        cfg["env"],
        bins=cfg["bins"],
        per_bin=cfg["per_bin"],
        tolerance=cfg["tolerance"],
        seed=cfg["seed"],
        params=cfg["params"],
        name=name,
    )


def load_instance_set(name_or_path: str) -> InstanceSet:
    """A shipped set by name (``sokoban_v1``) or any instance-set JSON file by path."""
    path = Path(name_or_path)
    if path.suffix == ".json":
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(f"Cannot read instance set {path}: {exc.strerror or exc}.") from None
    else:
        try:
            shipped = resources.files("metaharness.agents.environments") / "instances" / f"{name_or_path}.json"
            text = shipped.read_text()
        except FileNotFoundError:
            raise InputError(
                f"No shipped instance set {name_or_path!r}; shipped: {', '.join(SET_CONFIGS)} "
                f"(or pass a path to an instance-set .json file)."
            ) from None
    try:
        data = json.loads(text)
        instances = [PuzzleInstance(**item) for item in data.pop("instances")]
        return InstanceSet(**data, instances=instances)
    except (json.JSONDecodeError, TypeError, KeyError) as exc:
        raise InputError(f"{name_or_path} is not an instance-set file ({exc}).") from None


def write_instance_set(instance_set: InstanceSet, path: str | Path) -> None:
    Path(path).write_text(json.dumps(instance_set.to_json(), indent=1) + "\n")


if __name__ == "__main__":  # python -m metaharness.agents.environments.puzzle_instances: rebuild the shipped sets
    folder = Path(__file__).with_name("instances")
    folder.mkdir(exist_ok=True)
    for set_name in SET_CONFIGS:
        write_instance_set(build_instance_set(set_name), folder / f"{set_name}.json")
        print(f"wrote {folder / f'{set_name}.json'}")
