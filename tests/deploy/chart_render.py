"""A small renderer for the Go templates of deploy/helm/kgpu (there is no helm in Debian 12).

It implements the part of text/template the chart uses, with Go's semantics: actions with
{{- -}} trimming, comments, pipelines with parenthesised sub-pipelines, `if`/`else if`/`else`,
`with`, `range` (over lists, and over maps in key order), `define`/`include` (also of a template
file by its path, as `include (print $.Template.BasePath "/configmap.yaml") .`), `$` as the data
the current template was executed with, a missing map key as nil (an error only when a field of
it is taken), and values printed as Go prints them (true/false, not True/False). Functions: the
few of text/template and Sprig/Helm the chart calls (FUNCS). Anything else is a TemplateError
naming the template and the action, so a template that starts using more fails the tests here
rather than rendering wrong.

    Chart(chart_dir, {"runtimeInstall.enabled": False}).render("configmap.yaml")  # --set a.b=value
    Chart(chart_dir).manifests()   # [(template, [YAML documents])] of every template, as `helm template`
"""
import copy
import hashlib
import pathlib
import re

import yaml


class TemplateError(Exception):
    pass


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|`[^`]*`|\(|\)|\||:=|[^\s()|]+')


def _tokens(action):
    return _TOKEN.findall(action)


def go_str(v):
    """fmt.Sprint of a value decoded from YAML, as text/template prints it (Helm prints a missing
    value as nothing)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(int(v)) if v.is_integer() and abs(v) < 1e21 else repr(v)
    if isinstance(v, list):
        return "[" + " ".join(go_str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_str(v[k])}" for k in sorted(v)) + "]"
    return str(v)


def _empty(v):
    """Go template truth (and Sprig's `default`): false, 0, nil and empty strings, lists, maps."""
    return v is None or v is False or (not isinstance(v, bool) and isinstance(v, (int, float)) and v == 0) or \
        (isinstance(v, (str, list, dict, tuple)) and len(v) == 0)


def _to_yaml(v):
    """Helm's toYaml (sigs.k8s.io/yaml: keys sorted), without the trailing newline."""
    if v is None:
        return "null"
    out = yaml.safe_dump(v, default_flow_style=False, sort_keys=True, width=1 << 20)
    if out.endswith("\n...\n"):  # a plain scalar: PyYAML closes the document
        out = out[:-len("\n...\n")]
    return out.rstrip("\n")


def _quote(*args):
    return " ".join('"' + go_str(a).replace("\\", "\\\\").replace('"', '\\"') + '"' for a in args if a is not None)


def _printf(fmt, *args):
    out, i = [], 0
    for piece in re.split(r"(%[sdvq%])", fmt):
        if piece == "%%":
            out.append("%")
        elif re.fullmatch(r"%[sdvq]", piece):
            if i >= len(args):
                raise TemplateError(f"printf {fmt!r}: missing argument")
            out.append(_quote(args[i]) if piece == "%q" else go_str(args[i]))
            i += 1
        else:
            out.append(piece)
    return "".join(out)


def _print(*args):
    # fmt.Sprint: a space between operands when neither is a string.
    out = ""
    for i, a in enumerate(args):
        if i and not isinstance(a, str) and not isinstance(args[i - 1], str):
            out += " "
        out += go_str(a)
    return out


def _dict(*kv):
    if len(kv) % 2:
        raise TemplateError("dict needs key/value pairs")
    return {str(kv[i]): kv[i + 1] for i in range(0, len(kv), 2)}


def _required(msg, v):
    if _empty(v) and v is not False:
        raise TemplateError(f"required: {msg}")
    return v


class Chart:
    def __init__(self, chart_dir, values_overrides=None):
        self.dir = pathlib.Path(chart_dir)
        self.meta = yaml.safe_load((self.dir / "Chart.yaml").read_text())
        self.values = yaml.safe_load((self.dir / "values.yaml").read_text())
        for path, value in (values_overrides or {}).items():  # --set a.b.c=value
            node = self.values
            *parents, last = path.split(".")
            for part in parents:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[last] = copy.deepcopy(value)
        base = f"{self.meta['name']}/templates"
        self.root = {"Values": self.values,
                     "Release": {"Name": "kgpu", "Namespace": self.values.get("namespace"), "Service": "Helm"},
                     "Chart": {"Name": self.meta["name"], "Version": self.meta["version"],
                               "AppVersion": self.meta["appVersion"]},
                     "Template": {"BasePath": base},
                     "Files": {"Get": lambda path: (self.dir / path).read_text()}}
        self.defines = {}
        self.files = {}  # template path ("kgpu/templates/x.yaml") -> tree
        for t in sorted((self.dir / "templates").iterdir()):
            if t.is_file():
                self.files[f"{base}/{t.name}"] = self._parse(t.read_text(), t.name)

    # ---- parsing: a tree of ("text", s) / ("action", tokens) / (block, tokens, body, else_body)

    def _parse(self, text, name):
        parts, pos = [], 0
        for m in re.finditer(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", text, re.S):
            before = text[pos:m.start()]
            if m.group(1):
                before = before.rstrip()
            if parts and parts[-1][0] == "trim":
                before = before.lstrip()
                parts.pop()
            parts.append(("text", before))
            line = text.count("\n", 0, m.start()) + 1
            parts.append(("action", m.group(2), line))
            if m.group(3):
                parts.append(("trim", ""))
            pos = m.end()
        tail = text[pos:]
        if parts and parts[-1][0] == "trim":
            tail = tail.lstrip()
            parts.pop()
        parts.append(("text", tail))
        # stack entries: [kind, tokens, body, else_body or None, chained (an `else if`), line]
        stack = [["root", None, [], None, False, 0]]

        def sink():
            return stack[-1][3] if stack[-1][3] is not None else stack[-1][2]

        for part in parts:
            if part[0] == "text":
                sink().append(("text", part[1]))
                continue
            _, action, line = part
            where = f"{name}:{line}"
            if action.startswith("/*"):
                if not action.endswith("*/"):
                    raise TemplateError(f"{where}: unclosed comment")
                continue
            toks = _tokens(action)
            if not toks:
                raise TemplateError(f"{where}: empty action")
            word = toks[0]
            if word in ("if", "with", "range", "define"):
                stack.append([word, toks[1:], [], None, False, line])
            elif word == "else":
                if len(stack) == 1 or stack[-1][3] is not None:
                    raise TemplateError(f"{where}: else without an open block")
                stack[-1][3] = []
                if len(toks) > 1:  # else if / else with: a block inside the else that shares the end
                    if toks[1] not in ("if", "with"):
                        raise TemplateError(f"{where}: unsupported else {toks[1]}")
                    stack.append([toks[1], toks[2:], [], None, True, line])
            elif word == "end":
                while True:
                    if len(stack) == 1:
                        raise TemplateError(f"{where}: end without a block")
                    kind, args, body, else_body, chained, opened = stack.pop()
                    if kind == "define":
                        if len(args) != 1 or not args[0].startswith('"'):
                            raise TemplateError(f"{name}:{opened}: define needs a quoted name")
                        self.defines[yaml.safe_load(args[0])] = body
                    else:
                        sink().append((kind, args, body, else_body or [], f"{name}:{opened}"))
                    if not chained:
                        break
            elif word in ("block", "template", "break", "continue") or ":=" in toks or word.startswith("$") and \
                    len(toks) > 1 and toks[1] == ",":
                raise TemplateError(f"{where}: unsupported action {action!r}")
            else:
                sink().append(("action", toks, where))
        if len(stack) != 1:
            raise TemplateError(f"{name}:{stack[-1][5]}: {stack[-1][0]} is never closed")
        return stack[0][2]

    # ---- evaluation

    def _field(self, node, chain, token):
        for part in chain:
            if node is None:
                raise TemplateError(f"{token}: nil pointer evaluating .{part}")
            if not isinstance(node, dict):
                raise TemplateError(f"{token}: can't evaluate field {part} in {type(node).__name__}")
            node = node.get(part)  # a missing key is nil, as for Go maps
        return node

    def _operand(self, tok, dot, top):
        if tok.startswith('"'):
            return yaml.safe_load(tok)
        if tok.startswith("`"):
            return tok[1:-1]
        if re.fullmatch(r"-?\d+", tok):
            return int(tok)
        if tok in ("true", "false"):
            return tok == "true"
        if tok == "nil":
            return None
        if tok == ".":
            return dot
        if tok == "$":
            return top
        if tok.startswith("$."):
            return self._field(top, tok[2:].split("."), tok)
        if tok.startswith("."):
            return self._field(dot, tok[1:].split("."), tok)
        raise TemplateError(f"unsupported operand {tok}")

    def _split(self, toks, sep):
        """toks split at `sep` outside parentheses."""
        out, cur, depth = [], [], 0
        for t in toks:
            if t == "(":
                depth += 1
            elif t == ")":
                depth -= 1
                if depth < 0:
                    raise TemplateError("unbalanced )")
            if t == sep and depth == 0:
                out.append(cur)
                cur = []
            else:
                cur.append(t)
        if depth:
            raise TemplateError("unbalanced (")
        out.append(cur)
        return out

    def _args(self, toks, dot, top):
        """The operands of a command: literals, fields, and parenthesised pipelines."""
        out, i = [], 0
        while i < len(toks):
            if toks[i] == "(":
                depth, j = 0, i
                while True:
                    depth += {"(": 1, ")": -1}.get(toks[j], 0)
                    if depth == 0:
                        break
                    j += 1
                out.append(self._pipeline(toks[i + 1:j], dot, top))
                i = j + 1
            elif toks[i] == ")":
                raise TemplateError("unbalanced )")
            else:
                out.append(self._operand(toks[i], dot, top))
                i += 1
        return out

    _NONE = object()

    def _command(self, toks, dot, top, piped):
        if not toks:
            raise TemplateError("empty command in a pipeline")
        fn = toks[0]
        if fn in self.FUNCS:
            args = self._args(toks[1:], dot, top) + ([] if piped is self._NONE else [piped])
            try:
                return self.FUNCS[fn](self, dot, top, *args)
            except TypeError as e:
                raise TemplateError(f"{fn}: {e}") from e
        if re.fullmatch(r"[A-Za-z_]\w*", fn):
            raise TemplateError(f"unsupported function {fn}")
        head = self._args(toks[:1], dot, top)[0]
        args = self._args(toks[1:], dot, top) + ([] if piped is self._NONE else [piped])
        if callable(head):
            return head(*args)
        if args:
            raise TemplateError(f"{' '.join(toks)}: {fn} is not a function and takes no arguments")
        return head

    def _pipeline(self, toks, dot, top):
        value = self._NONE
        for command in self._split(toks, "|"):
            value = self._command(command, dot, top, value)
        return value

    def _exec(self, nodes, dot, top):
        out = []
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
                continue
            try:
                if kind == "action":
                    out.append(go_str(self._pipeline(node[1], dot, top)))
                elif kind == "if":
                    out.append(self._exec(node[3] if _empty(self._pipeline(node[1], dot, top)) else node[2], dot, top))
                elif kind == "with":
                    v = self._pipeline(node[1], dot, top)
                    out.append(self._exec(node[3], dot, top) if _empty(v) else self._exec(node[2], v, top))
                elif kind == "range":
                    v = self._pipeline(node[1], dot, top)
                    items = [v[k] for k in sorted(v)] if isinstance(v, dict) else (v or [])
                    if not isinstance(items, list):
                        raise TemplateError(f"range over {type(v).__name__}")
                    out.append("".join(self._exec(node[2], x, top) for x in items) if items
                               else self._exec(node[3], dot, top))
            except TemplateError as e:
                if re.match(r"[\w./-]+:\d+: ", str(e)):  # located already (the innermost action)
                    raise
                raise TemplateError(f"{node[-1]}: {e}") from e
        return "".join(out)

    def _include(self, dot, top, name, arg):
        if name in self.defines:
            return self._exec(self.defines[name], arg, arg)
        if name in self.files:
            return self._exec(self.files[name], arg, arg)
        raise TemplateError(f"include: no template {name!r}")

    FUNCS = {
        "and": lambda self, dot, top, *a: next((x for x in a if _empty(x)), a[-1]),
        "or": lambda self, dot, top, *a: next((x for x in a if not _empty(x)), a[-1]),
        "not": lambda self, dot, top, a: _empty(a),
        "eq": lambda self, dot, top, a, *b: any(a == x for x in b),
        "ne": lambda self, dot, top, a, b: a != b,
        "default": lambda self, dot, top, d, v=None: d if _empty(v) else v,
        "include": lambda self, dot, top, name, arg: self._include(dot, top, name, arg),
        "required": lambda self, dot, top, msg, v: _required(msg, v),
        "nindent": lambda self, dot, top, n, s: "\n" + "\n".join(" " * n + line for line in go_str(s).split("\n")),
        "indent": lambda self, dot, top, n, s: "\n".join(" " * n + line for line in go_str(s).split("\n")),
        "toYaml": lambda self, dot, top, v: _to_yaml(v),
        "quote": lambda self, dot, top, *a: _quote(*a),
        "printf": lambda self, dot, top, fmt, *a: _printf(fmt, *a),
        "print": lambda self, dot, top, *a: _print(*a),
        "trimPrefix": lambda self, dot, top, prefix, s: s[len(prefix):] if s.startswith(prefix) else s,
        "sha256sum": lambda self, dot, top, s: hashlib.sha256(go_str(s).encode()).hexdigest(),
        "dict": lambda self, dot, top, *kv: _dict(*kv),
        "join": lambda self, dot, top, sep, v: sep.join(go_str(x) for x in v),
    }

    # ---- the chart

    def render(self, template):
        """The text of templates/<template>, as `helm template --show-only` prints it."""
        name = f"{self.meta['name']}/templates/{template}"
        if name not in self.files:
            raise TemplateError(f"no template {template}")
        try:
            return self._exec(self.files[name], self.root, self.root)
        except TemplateError as e:
            raise TemplateError(f"{self.dir.name}/templates/{template}: {e}") from e

    def manifests(self):
        """[(template, [documents])] of every template helm renders into objects (not the _*.tpl
        partials, not NOTES.txt); a template that renders nothing has no documents."""
        out = []
        for name in sorted(self.files):
            base = name.rsplit("/", 1)[1]
            if base.startswith("_") or base == "NOTES.txt":
                continue
            text = self.render(base)
            try:
                docs = [d for d in yaml.safe_load_all(text) if d is not None]
            except yaml.YAMLError as e:
                raise TemplateError(f"{self.dir.name}/templates/{base} renders YAML that does not parse: {e}\n{text}")
            out.append((base, docs))
        return out
