"""Reading a spec's YAML without trusting it: a bounded size, depth and alias expansion (a "billion laughs" file is
refused in milliseconds, not after minutes and gigabytes), duplicate keys refused, and the line of every key path
recorded while the file is read, so the index grows with the file, not with what its aliases expand to."""
from __future__ import annotations

from dataclasses import dataclass

import yaml

MAX_BYTES = 256 * 1024   # a spec is a few KB written by hand
MAX_DEPTH = 50           # nesting levels; a spec needs about 6
MAX_VALUES = 50_000      # values after expanding every alias; the largest suite has about 600

MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass
class YamlProblem(Exception):
    line: int | None
    message: str


@dataclass
class Document:
    data: object
    lines: dict[tuple, int]    # key path -> line number (paths through an alias stop at the alias)


try:  # libyaml's parser, with PyYAML's composer (whose compose_node records where each node was written)
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.cyaml import CParser
    from yaml.resolver import Resolver

    class _Base(Composer, CParser, SafeConstructor, Resolver):
        def __init__(self, text: str):
            CParser.__init__(self, text)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
except ImportError:  # PyYAML built without libyaml: the same in pure Python, about 3x slower
    _Base = yaml.SafeLoader  # type: ignore[misc,assignment]


class _Loader(_Base):
    def __init__(self, text: str, kind: str = "a spec"):
        super().__init__(text)
        self.kind = kind                     # what the file is, for the messages: "a spec", "a testbed file"
        self.lines: dict[tuple, int] = {}
        self.paths: dict[int, tuple] = {}    # id(node) -> its key path (where it was written)
        self.sizes: dict[int, int] = {}      # id(node) -> values it expands to
        self.stack: list[tuple] = []
        self.duplicates: list[YamlProblem] = []
        self.aliases = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        line = event.start_mark.line + 1
        if parent is None:
            path = ()
        elif index is None:                  # a mapping key's own content: no path of its own
            path = self.stack[-1] + ("<key>",)
        elif isinstance(index, int):
            path = self.stack[-1] + (index,)
        else:                                # a mapping value: its line is the key's
            path = self.stack[-1] + (index.value if isinstance(index, yaml.ScalarNode) else "<key>",)
            line = index.start_mark.line + 1
        if len(self.stack) >= MAX_DEPTH:
            raise YamlProblem(line, f"nested more than {MAX_DEPTH} levels deep; {self.kind} needs far fewer")
        self.lines.setdefault(path, line)
        self.stack.append(path)
        try:
            node = super().compose_node(parent, index)
        finally:
            self.stack.pop()
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if id(node) not in self.sizes:
                raise YamlProblem(line, f"the alias *{event.anchor} is inside the value it refers to; "
                                        f"{self.kind} cannot contain itself")
            return node
        self.paths[id(node)] = path
        size = 1 + sum(self.sizes[id(child)] for child in _children(node))
        if size > MAX_VALUES:
            raise YamlProblem(line, f"aliases expand this value to more than {MAX_VALUES} values; write the values "
                                    "out, or use fewer aliases" if self.aliases else
                                    f"this value has more than {MAX_VALUES} values; {self.kind} needs far fewer")
        self.sizes[id(node)] = size
        return node

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # e.g. a 5000-digit integer, or the date 2024-13-45
            why = f"a number with this many digits is not a value {self.kind} needs" if "digits" in str(exc) else exc
            raise YamlProblem(node.start_mark.line + 1, f"cannot read the value {_short(node)}: {why}") from None

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self._duplicates(node)
        return super().construct_mapping(node, deep)

    def _duplicates(self, node: yaml.MappingNode) -> None:
        """Two equal keys in one mapping: YAML keeps the last one silently; the user meant one of them."""
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            first = seen.setdefault(key, key_node)
            if first is not key_node:
                where = self.paths.get(id(node), ()) + (key,)
                self.duplicates.append(YamlProblem(
                    key_node.start_mark.line + 1,
                    f"{dotted(where)}: given twice, on lines {first.start_mark.line + 1} and "
                    f"{key_node.start_mark.line + 1}; YAML would silently keep the last one: keep one"))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _short(node: yaml.Node) -> str:
    text = str(node.value)
    return repr(text if len(text) <= 30 else text[:30] + "...")


def dotted(loc: tuple) -> str:
    """A key path as a user writes it: workloads[0].duration."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def decode(raw: bytes) -> str:
    """UTF-8 text (a byte-order mark is allowed); raises YamlProblem at the line of the first bad byte."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise YamlProblem(line, f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x}); save it as UTF-8") from None


def read(text: str, kind: str = "a spec") -> Document:
    """One YAML document; raises YamlProblem (first problem) or a list of them (duplicate keys). `kind` names what
    the file is in the messages."""
    if len(text) > MAX_BYTES:
        raise YamlProblem(None, f"the file has {len(text)} characters; {kind} has at most {MAX_BYTES}")
    loader = None
    try:
        loader = _Loader(text, kind)  # the reader refuses unprintable characters here already
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlProblem(mark.line + 1 if mark else None,
                          f"not valid YAML: {exc.problem or exc.context}") from None
    except yaml.reader.ReaderError as exc:
        line = text[:exc.position].count("\n") + 1 if isinstance(exc.position, int) else None
        raise YamlProblem(line, f"not valid YAML: character #x{exc.character:04x} is not allowed in YAML text"
                          if isinstance(exc.character, int) else f"not valid YAML: {exc.reason}") from None
    except yaml.YAMLError as exc:
        raise YamlProblem(None, f"not valid YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if loader.duplicates:
        raise DuplicateKeys(loader.duplicates)
    return Document(data, loader.lines)


class DuplicateKeys(Exception):
    def __init__(self, problems: list[YamlProblem]):
        self.problems = problems
        super().__init__("; ".join(p.message for p in problems))
