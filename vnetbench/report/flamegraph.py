"""An interactive flame graph of folded stacks, as one self-contained HTML block (inline SVG drawn by flamegraph.js,
no network): each frame coloured by the mechanism its function belongs to (mechanisms.py)."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from ..probes import mechanisms

JS = Path(__file__).with_name("flamegraph.js")
MIN_SHARE = 0.0005  # frames holding less than this share of the samples are left out (they could not be seen)
PALETTE = ["#f4a261", "#e76f51", "#2a9d8f", "#8ab17d", "#e9c46a", "#90be6d", "#43aa8b", "#f9844a", "#577590",
           "#f8961e", "#4d908e", "#f94144", "#277da1", "#b5838d", "#9d8189", "#6d597a", "#ffb4a2", "#a3c4f3",
           "#cdb4db", "#bde0fe", "#ffc8dd", "#d4a373", "#ccd5ae", "#e9edc9", "#faedcd", "#caf0f8", "#90e0ef",
           "#ade8f4", "#48cae4", "#c77dff", "#e0aaff", "#ff99c8", "#fcf6bd", "#d0f4de", "#a9def9", "#e4c1f9"]


def tree(folded: dict[str, int]) -> tuple[list, list[str]]:
    """[name, samples, mechanism index, children] from folded stacks, and the mechanisms' names by index."""
    names = ["", *mechanisms.labels()]
    index = {n: i for i, n in enumerate(names)}
    root: dict = {"n": "all", "v": 0, "c": {}}
    for stack, count in folded.items():
        root["v"] += count
        node = root
        for frame in stack.split(";"):
            node = node["c"].setdefault(frame, {"n": frame, "v": 0, "c": {}})
            node["v"] += count
    floor = root["v"] * MIN_SHARE

    def conv(node: dict, depth: int) -> list:
        name = node["n"]
        if depth == 1:  # the process: a daemon's or the tool's mechanism
            mech = mechanisms.of_comm(name, True) or mechanisms.of_comm(name, False) or ""
        else:
            mech = mechanisms.of_symbol(name[:-4] if name.endswith("_[k]") else name) or "" if depth else ""
        kids = sorted((c for c in node["c"].values() if c["v"] >= floor), key=lambda c: c["n"])
        return [name, node["v"], index.get(mech, 0), [conv(c, depth + 1) for c in kids]]
    return conv(root, 0), names


@dataclass
class FlameGraph:
    """A report block: renders itself (render.py asks it for HTML or Markdown)."""
    id: str
    title: str
    folded: dict[str, int]
    caption: str = ""

    def to_html(self) -> str:
        data, names = tree(self.folded)
        labels = mechanisms.labels()
        spec = {"tree": data, "mechanisms": [labels.get(n, n) for n in names],
                "colors": ["#c8c8c8", *PALETTE * 2][:len(names)]}
        payload = json.dumps(spec, separators=(",", ":")).replace("<", "\\u003c")
        e = html.escape
        return (f'<figure class="flame" id="{e(self.id)}"><div class="fg-bar"><input type="search" '
                f'placeholder="highlight functions (regular expression)" aria-label="search"> <button type="button">'
                f'reset zoom</button> <span class="fg-info"></span></div><div class="fg-legend" style="font-size:11px"></div>'
                f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" preserveAspectRatio="none"></svg>'
                f'<script type="application/json">{payload}</script>'
                f"<script>{JS.read_text()}</script><script>vbFlame({json.dumps(self.id)});</script>"
                f"<figcaption><strong>{e(self.title)}.</strong> {e(self.caption)}</figcaption></figure>")

    def to_markdown(self) -> str:
        return (f"*{self.title}: the flame graph is in the HTML report; `vnetbench export --format folded` writes "
                f"its stacks for FlameGraph or speedscope.*")
