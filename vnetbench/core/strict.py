"""What every model of user input shares (the spec, workload parameters, datapath options): unknown fields are
errors, true/false is not a number, and a message quoting the user's text stays one printable line."""
from __future__ import annotations

import re
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _takes(annotation: Any, kinds: tuple) -> bool:
    return any(annotation is k for k in kinds) or any(_takes(a, kinds) for a in get_args(annotation))


def not_a_bool(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """Python counts true as 1: `pairs: true` or `duration: yes` must be an error, not one pair or one second."""
    annotation = model.model_fields[info.field_name].annotation
    items = value if isinstance(value, (list, tuple)) else [value]  # [true] in a list of numbers, too
    if any(isinstance(v, bool) for v in items) and _takes(annotation, (int, float)) and \
            not _takes(annotation, (bool, Any)):
        raise ValueError("write a number here, not true/false")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)  # built when first used

    @field_validator("*", mode="before")
    @classmethod
    def _not_a_bool(cls, v: Any, info: ValidationInfo) -> Any:
        return not_a_bool(cls, v, info)


def pydantic_message(err: dict) -> str:
    """pydantic's message without its "Value error, " prefix (the one place every validation message goes through)."""
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return msg


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str) -> str:
    """A message as one printable line: a newline or a terminal escape in the user's text is shown, not obeyed."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
