"""The experiment file: what a user writes, validated into one problem per line before anything is built."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..core import yamlread
from ..core.strict import one_line
from .model import NAME_RE, Experiment, Repetitions, Rounds, _message  # noqa: F401 (the model, also named here)
from .validate import Problem, check


class SpecError(Exception):
    def __init__(self, lines: list[str]):
        self.lines = [one_line(line) for line in lines]
        super().__init__("\n".join(self.lines))


@dataclass
class LoadedSpec:
    experiment: Experiment
    text: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


SUITES_DIR = Path(__file__).parent / "suites"


def suite_path(name: str) -> Path:
    return SUITES_DIR / f"{name}.yaml"


def load(path: str | Path, profile: str | None = None) -> LoadedSpec:
    """A spec file, or a built-in suite written `suite:NAME`."""
    if str(path).startswith("suite:"):
        name = str(path)[len("suite:"):]
        if not NAME_RE.fullmatch(name) or not suite_path(name).is_file():
            known = ", ".join(sorted(p.stem for p in SUITES_DIR.glob("*.yaml")))
            raise SpecError([f"{path}: no such suite; built-in suites: {known}"])
        path = suite_path(name)
    path = Path(path)
    try:
        if path.is_dir():
            raise SpecError([f"{path}: is a directory; give the experiment file (a .yaml file)"])
        with path.open("rb") as fh:
            raw = fh.read(yamlread.MAX_BYTES + 1)  # bounded: /dev/zero or a huge file must not eat the memory
        text = yamlread.decode(raw)
    except OSError as exc:
        raise SpecError([f"{path}: cannot read the file: {exc.strerror or exc}"]) from None
    except yamlread.YamlProblem as exc:
        raise SpecError([_where(str(path), exc.line) + f": {exc.message}"]) from None
    return loads(text, str(path), profile)


def merge(base: Any, over: Any) -> Any:
    """Deep merge of mappings; anything else in `over` replaces what `base` had."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
    return over


def loads(text: str, source: str = "<spec>", profile: str | None = None) -> LoadedSpec:
    try:
        doc = yamlread.read(text)
    except yamlread.YamlProblem as exc:
        raise SpecError([_where(source, exc.line) + f": {exc.message}"]) from None
    except yamlread.DuplicateKeys as exc:
        raise SpecError([_where(source, p.line) + f": {p.message}" for p in exc.problems]) from None
    data, lines = doc.data, doc.lines
    if data is None:
        raise SpecError([f"{source}: the file is empty; a spec is a mapping with at least `name` and `workloads`"])
    if not isinstance(data, dict):
        raise SpecError([f"{source}:{lines.get((), 1)}: the file must be a mapping with at least `name` and "
                         f"`workloads`, not a {_kind(data)}"])
    # A spec vnetbench expanded with a profile (stored with its campaign, read again by --resume) no longer lists
    # the other profiles' levels, so its `when`/`exclude` levels were checked when it was expanded.
    declared = _declared_levels(data) if profile is not None or not data.get("profile") else None
    if profile is not None:
        data, text, lines = _apply_profile(data, profile, source, lines)
    problems: list[Problem] = []
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as exc:
        problems += [Problem(tuple(e["loc"]), _message(e)) for e in exc.errors()]
        exp = _lenient(data)
    if exp is not None:  # the factor and workload checks against the registries (validate.py)
        seen = {p.loc[:1] for p in problems}
        problems += [p for p in check(exp, declared, complete=not problems) if p.loc[:1] not in seen]
    if problems:
        raise SpecError([p.render(source, lines) for p in problems])
    return LoadedSpec(exp, text, source)


def _declared_levels(data: dict) -> dict[str, list]:
    """Every level the file gives each factor, in its own `factors` and in every profile's."""
    profiles = data.get("profiles")
    sections = [data, *(p for p in profiles.values() if isinstance(p, dict))] if isinstance(profiles, dict) else [data]
    out: dict[str, list] = {}
    for section in sections:
        factors = section.get("factors")
        for f, v in (factors.items() if isinstance(factors, dict) else ()):
            out.setdefault(f, []).extend(v if isinstance(v, list) else [v])
    return out


def _where(source: str, line: int | None) -> str:
    return f"{source}:{line}" if line else source


def _kind(value: Any) -> str:
    return {list: "list", str: "text", int: "number", float: "number", bool: "true/false"}.get(type(value), "value")


def _apply_profile(data: dict, profile: str, source: str, lines: dict[tuple, int]) -> tuple[dict, str, dict]:
    """The spec with one profile merged in; the text stored with the campaign is the merged spec, so a
    resume or a re-run repeats exactly what ran. Errors point at the profile's own lines where it set the value."""
    profiles = data.get("profiles") or {}
    at = _where(source, lines.get(("profiles",)))
    if not isinstance(profiles, dict) or profile not in profiles:
        names = ", ".join(map(str, profiles)) if isinstance(profiles, dict) and profiles else "none defined"
        raise SpecError([f"{at}: profiles: no profile '{profile}'; this file has: {names}"])
    over = profiles[profile] or {}
    if not isinstance(over, dict):
        raise SpecError([f"{_where(source, lines.get(('profiles', profile)))}: profiles.{profile}: write a mapping of "
                         f"the fields this profile changes, not a {_kind(over)}"])
    base = {k: v for k, v in data.items() if k != "profiles"}
    merged = merge(base, over)
    merged["profile"] = profile
    return merged, yaml.safe_dump(merged, sort_keys=False), _profile_lines(base, over, profile, lines)


def _profile_lines(base: dict, over: dict, profile: str, lines: dict[tuple, int]) -> dict[tuple, int]:
    """The line index of the merged spec: the profile's lines where it sets a value, the base file's elsewhere
    (a value the profile replaces keeps none of the base's lines below it)."""
    replaced = list(_replaced(base, over, ()))
    own = {p: n for p, n in lines.items() if p[:1] != ("profiles",)
           and not any(p[:len(r)] == r for r in replaced)}
    prefix = ("profiles", profile)
    own |= {p[2:]: n for p, n in lines.items() if p[:2] == prefix and len(p) > 2}
    return own


def _replaced(base: Any, over: Any, path: tuple):
    if isinstance(base, dict) and isinstance(over, dict):
        for k, v in over.items():
            yield from _replaced(base.get(k), v, path + (k,))
    else:
        yield path


def _lenient(data: dict) -> Experiment | None:
    """The parts of a spec that have the right shape, so the factor and workload checks can still report
    their problems when some other field is wrong: the user gets every problem in one go."""
    factors, wls = data.get("factors", {}), data.get("workloads", [])
    if not isinstance(factors, dict) or not isinstance(wls, list) or not all(isinstance(w, dict) for w in wls):
        return None
    rules = {k: v for k in ("exclude", "include") if isinstance(v := data.get(k, []), list)
             and all(isinstance(r, dict) for r in v)}
    return Experiment.model_construct(factors=factors, workloads=wls, **{"exclude": [], "include": []} | rules)


def schema() -> dict:
    return Experiment.model_json_schema()
