"""A report Document written out: one self-contained HTML file (inline CSS, figures as base64 PNG, no script and no
external reference of any kind) or GitHub Markdown, plus each figure as a PNG or SVG file on request."""
from __future__ import annotations

import base64
import datetime as dt
import html
import os
import pickle
import re
import sys
import tempfile
import threading
from pathlib import Path

from .analyses.base import FigureData, TableData
from .document import Block, Bullets, Document, Fold, Para
from .figures import encode, library

FORMATS = ("html", "md")
FIGURE_FORMATS = ("png", "svg")
_NUMERIC = re.compile(r"^[-+−]?(\d|\.\d)")
_STATUS = {"done", "ok", "skipped", "failed", "pending"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2329;margin:0;
     background:#f6f7f9}
header{background:#1f3a5f;color:#fff;padding:18px 32px}
header h1{margin:0 0 6px;font-size:22px}
nav a{color:#cfe0f5;margin-right:16px;text-decoration:none;font-size:13px}
main{padding:8px 20px 40px;max-width:1600px}
section{background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:6px 14px 14px;margin:16px 0}
h2{font-size:18px;border-bottom:2px solid #1f3a5f;padding-bottom:4px}
.tbl{overflow-x:auto;margin:12px 0}
.tbl.small{display:inline-block;vertical-align:top;margin-right:28px;max-width:100%}
table{border-collapse:collapse;font-size:12.5px}
caption{text-align:left;font-weight:600;padding:4px 0;font-size:13.5px}
th,td{border:1px solid #dde2e8;padding:3px 6px;vertical-align:top}
thead th{background:#eef2f7;position:sticky;top:0}
tbody tr:nth-child(even){background:#fafbfc}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.s{white-space:nowrap}td.w{min-width:15em}
table.kv th{text-align:left;background:#f3f5f8;font-weight:600;white-space:nowrap}
.st-done,.st-ok{color:#1a7f37;font-weight:600}.st-skipped,.st-pending{color:#9a6700;font-weight:600}
.st-failed{color:#cf222e;font-weight:600}
.warn{background:#fff8e6;border-left:4px solid #d4a72c;padding:6px 10px}
ul.warn{padding-left:28px}
.scope{background:#eef4fb;border-left:4px solid #1f3a5f;padding:6px 10px}
.note{color:#57606a;font-size:12.5px;white-space:pre-wrap}
figure{margin:16px 0}figure img{max-width:100%;height:auto;border:1px solid #eef0f3}
figcaption{color:#57606a;font-size:12.5px}
details{margin:12px 0}summary{cursor:pointer;font-weight:600}
footer{color:#57606a;font-size:12px;padding:0 32px 24px}
"""


class Images:
    """Each figure encoded once per format, whatever number of outputs use it."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], bytes] = {}

    def get(self, fig: FigureData, fmt: str) -> bytes:
        key = (id(fig.source), fmt)
        if key not in self._cache:
            self._cache[key] = encode(fig.figure, fmt)
        return self._cache[key]

    def prefetch(self, figs: list[FigureData], fmts: list[str], second: Second) -> None:
        """Every figure made and encoded at once in every format (in their order, in one process: an SVG's layout
        moves what a PNG after it starts from), by this process and the second one: drawing is most of a report's
        time."""
        todo = list({id(f.source): f for f in figs if any((id(f.source), fmt) not in self._cache for fmt in fmts)
                     }.values())
        for fig, data in zip(todo, second.share(todo, fmts)):
            self._cache.update(((id(fig.source), fmt), d) for fmt, d in zip(fmts, data))


MAX_SHARED = 16384  # figures whose indices (2 bytes each) a pipe holds before anyone reads it


class Second:
    """A forked second process for the figures, started before the document is built (`vnetbench report`): it
    imports matplotlib while this process reads the campaign, then makes and encodes the figures it takes. Their
    indices wait in a pipe, a read of 2 bytes takes one: whichever process runs ahead takes more. The figures reach
    it pickled (a builder's name and plain data: figures._later). Not beside other threads (a lock one of them held,
    the import lock say, would stay held in the child), nor on one CPU. Leaving it as a context manager ends it."""

    def __init__(self, wanted: bool = True) -> None:
        self.pid = 0
        if not wanted or (os.cpu_count() or 1) < 2 or threading.active_count() > 1:
            return
        self._figs, self._out = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self._take, self._put = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: its own exit, without the parent's exit handlers or buffered output
            code = 1
            try:
                os.close(self._put)
                self._serve()
                code = 0
            finally:
                os._exit(code)

    def __enter__(self) -> Second:
        return self

    def __exit__(self, *exc) -> None:
        self._end()

    def _serve(self) -> None:
        library()
        done: dict[int, list[bytes]] = {}
        first = os.read(self._take, 2)  # waits until the figures are in their file and their indices in the pipe
        if len(first) == 2:
            self._figs.seek(0)
            fmts, figs = pickle.load(self._figs)
            i = int.from_bytes(first, "big")
            done = {i: _encoded(figs[i], fmts), **dict(_taken(self._take, figs, fmts))}
        pickle.dump(done, self._out)
        self._out.flush()

    def share(self, figs: list[FigureData], fmts: list[str]) -> list[list[bytes]]:
        """figs encoded in fmts: those still to be made by both processes, the rest (and whatever the second one
        did not deliver) here."""
        lazy = self._hand_over([f for f in figs if not f.made], fmts) if self.pid else []
        try:
            mine = dict(_taken(self._take, lazy, fmts)) if lazy else {}
        finally:
            theirs = self._end()
        done = {id(f): mine.get(i) or theirs.get(i) for i, f in enumerate(lazy)}
        return [done.get(id(f)) or _encoded(f, fmts) for f in figs]

    def _hand_over(self, lazy: list[FigureData], fmts: list[str]) -> list[FigureData]:
        """The figures both processes take from: pickled into their file, then their indices into the pipe ([] when
        they cannot be pickled: all made here)."""
        lazy = lazy[:MAX_SHARED]
        try:
            pickle.dump((fmts, lazy), self._figs)
            self._figs.flush()
            os.write(self._put, b"".join(i.to_bytes(2, "big") for i in range(len(lazy))))
        except (pickle.PicklingError, TypeError, AttributeError):
            lazy = []
        finally:
            self._close_put()
        return lazy

    def _close_put(self) -> None:
        if self._put >= 0:
            os.close(self._put)
            self._put = -1

    def _end(self) -> dict[int, list[bytes]]:
        """Waits for the second process; what it made ({} when it failed, or had nothing to do)."""
        if not self.pid:
            return {}
        pid, self.pid = self.pid, 0
        self._close_put()
        os.close(self._take)
        ok = os.waitpid(pid, 0)[1] == 0
        with self._out, self._figs:
            self._out.seek(0)
            return pickle.load(self._out) if ok else {}


def _encoded(fig: FigureData, fmts: list[str]) -> list[bytes]:
    return [encode(fig.figure, fmt) for fmt in fmts]


def _taken(take: int, figs: list[FigureData], fmts: list[str]):
    while len(got := os.read(take, 2)) == 2:
        i = int.from_bytes(got, "big")
        yield i, _encoded(figs[i], fmts)


def write(doc: Document, output: Path, fmt: str, figures_dir: Path | None = None, figure_format: str = "png",
          second: Second | None = None) -> list[Path]:
    """Write the report (and the figure files); returns every file written. Frees the figures afterwards. `second`:
    the process started before the document was built, else one is started here when there are figures to make."""
    images = Images()
    fmts = list(dict.fromkeys([*([figure_format] if figures_dir else []), *(["png"] if fmt == "html" else [])]))
    with second or Second(bool(fmts) and len(doc.figures()) >= 4) as helper:
        images.prefetch(doc.figures(), fmts, helper)
    files = write_figures(doc, figures_dir, figure_format, images) if figures_dir else {}
    text = to_html(doc, images) if fmt == "html" else to_markdown(doc, _relative(files, output.parent))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    _close(doc)
    return [output, *files.values()]


def write_figures(doc: Document, directory: Path, fmt: str, images: Images) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for fig in doc.figures():
        path = directory / f"{fig.name}.{fmt}"
        path.write_bytes(images.get(fig, fmt))
        out[fig.name] = path
    return out


def _relative(files: dict[str, Path], base: Path) -> dict[str, str]:
    return {k: Path(os.path.relpath(p.resolve(), base.resolve())).as_posix() for k, p in files.items()}


def _close(doc: Document) -> None:
    if "matplotlib.pyplot" in sys.modules:  # an analysis may have made its figures with pyplot
        import matplotlib.pyplot as plt
        for fig in doc.figures():
            if fig.made:
                plt.close(fig.figure)


# ---- HTML -------------------------------------------------------------------------------------------------
def to_html(doc: Document, images: Images | None = None) -> str:
    images = images or Images()
    e = html.escape
    nav = "".join(f'<a href="#{s.id}">{e(s.nav or s.title)}</a>' for s in doc.sections)
    body = "".join(f'<section id="{s.id}"><h2>{e(s.title)}</h2>{_blocks(s.blocks, images)}</section>'
                   for s in doc.sections)
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(doc.title)}</title><style>{CSS}</style></head>\n<body><header><h1>{e(doc.title)}</h1>"
            f"<nav>{nav}</nav></header>\n<main>{body}</main>\n<footer>Written by vnetbench report on {now}."
            "</footer></body></html>\n")


def _blocks(blocks: list[Block], images: Images) -> str:
    return "\n".join(_block(b, images) for b in blocks)


def _block(b: Block, images: Images) -> str:
    e = html.escape
    if isinstance(b, Para):
        return f'<p class="{b.kind}">{e(b.text)}</p>' if b.kind else f"<p>{e(b.text)}</p>"
    if isinstance(b, Bullets):
        return f'<ul class="{b.kind}">' + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, TableData):
        return _table(b)
    if isinstance(b, FigureData):
        data = base64.b64encode(images.get(b, "png")).decode("ascii")
        return (f'<figure id="fig-{e(b.name)}"><img src="data:image/png;base64,{data}" alt="{e(b.title)}">'
                f"<figcaption><strong>{e(b.title)}.</strong> {e(b.caption)}</figcaption></figure>")
    if isinstance(b, Fold):
        return f"<details><summary>{e(b.summary)}</summary>{_blocks(b.blocks, images)}</details>"
    if hasattr(b, "to_html"):  # a block that renders itself (flamegraph.FlameGraph)
        return b.to_html()
    raise TypeError(f"unknown report block {type(b).__name__}")


def _table(t: TableData) -> str:
    e = html.escape
    kv = not any(t.columns)
    cap = f"<caption>{e(t.title)}</caption>" if t.title else ""
    head = "" if kv else "<thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in t.columns) + "</tr></thead>"
    rows = "".join("<tr>" + (f"<th>{e(r[0])}</th><td>{e(r[1])}</td>" if kv else "".join(_td(c, t.text) for c in r))
                   + "</tr>"
                   for r in t.rows)
    note = f'<p class="note">{e(t.note)}</p>' if t.note else ""
    small = "small" if len(t.columns) <= 2 else ""
    table = f'<table{" class=kv" if kv else ""}>{cap}{head}<tbody>{rows}</tbody></table>'
    return f'<div class="tbl {small}">{table}</div>{note}'


def _td(cell: object, plain: bool = False) -> str:
    """A cell classed for layout: status colour, right-aligned number (unless `plain`: text only), short text kept
    whole, long text wide."""
    text = str(cell)
    if text in _STATUS and not plain:
        cls = f"st-{text}"
    else:
        cls = "n" if _NUMERIC.match(text) and not plain else "s" if len(text) <= 16 else "w" if len(text) > 40 else ""
    return f'<td class="{cls}">{html.escape(text)}</td>' if cls else f"<td>{html.escape(text)}</td>"


# ---- Markdown ---------------------------------------------------------------------------------------------
def to_markdown(doc: Document, figure_links: dict[str, str] | None = None) -> str:
    links = figure_links or {}
    parts = [f"# {doc.title}"]
    if doc.figures() and not links:
        parts.append("> Figures are left out; `vnetbench report --figures DIR` writes them and links them here.")
    for s in doc.sections:
        parts.append(f"## {s.title}")
        parts += [_md(b, links, 3) for b in s.blocks]
    return "\n\n".join(p for p in parts if p) + "\n"


def _md(b: Block, links: dict[str, str], level: int) -> str:
    if isinstance(b, Para):
        if "\n" in b.text:
            return "```\n" + b.text.rstrip() + "\n```"
        if b.kind == "warn":
            return f"> **Warning:** {_esc(b.text)}"
        return f"> {_esc(b.text)}" if b.kind == "scope" else _esc(b.text)
    if isinstance(b, Bullets):
        return "\n".join(f"- {_esc(i)}" for i in b.items)
    if isinstance(b, TableData):
        return _md_table(b, level)
    if isinstance(b, FigureData):
        if b.name not in links:
            return ""
        return f"![{_esc(b.title)}]({links[b.name]})\n\n**{_esc(b.title)}.** {_esc(b.caption)}"
    if isinstance(b, Fold):
        return "\n\n".join([f"{'#' * level} {_esc(b.summary)}", *(_md(x, links, level + 1) for x in b.blocks)])
    if hasattr(b, "to_markdown"):  # a block that renders itself (flamegraph.FlameGraph)
        return b.to_markdown()
    raise TypeError(f"unknown report block {type(b).__name__}")


def _md_table(t: TableData, level: int) -> str:
    title = f"{'#' * level} {_esc(t.title)}\n\n" if t.title else ""
    note = f"\n\n{_esc(t.note)}" if t.note else ""
    if not any(t.columns):
        return title + "\n".join(f"- **{_esc(k)}**: {_esc(v)}" for k, v in t.rows) + note
    lines = ["| " + " | ".join(_esc(c) for c in t.columns) + " |",
             "|" + "|".join("---:" if _numeric_col(t, i) else "---" for i in range(len(t.columns))) + "|"]
    lines += ["| " + " | ".join(_esc(c) for c in r) + " |" for r in t.rows]
    return title + "\n".join(lines) + note


def _numeric_col(t: TableData, i: int) -> bool:
    if t.text:
        return False
    cells = [str(r[i]) for r in t.rows if i < len(r) and str(r[i]) not in ("", "-")]
    return bool(cells) and all(_NUMERIC.match(c) for c in cells)


def _esc(text: object) -> str:
    """Plain text safe inside Markdown and table cells."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;")
    return s.replace("\r", "").replace("\n", "<br>")
