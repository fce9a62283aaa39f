"""Local rewrites as pattern / check / rewrite; the graph surgery is done here, once.

A `Rule` declares

    pattern(p)      the ops, how they connect and what is captured, built with `p` (a
                    `Pattern`); returns the value a match replaces
    check(m)        why this match (a read-only `Match`) cannot be rewritten: one sentence
                    for the report's refused list, or None
    rewrite(b, m)   (the replacement value, a one-line description): new nodes made with `b`
                    (a `Build`) from the captured values, nothing else touched

`apply_rules` tries the rules at every node of a graph. For a match that passes `check`
it inserts the new nodes before the node making the replaced value, gives that value's
readers, graph-output slot and name to the replacement, carries the placement marks over,
and removes the matched nodes nothing reads any more and the initializers only they read.
A match whose inner values are also read from outside is refused (it would be computed
twice).

Patterns (`p.op` and the others return a handle: the op's output):

    p.op("Conv|Gemm", "x", "w", "c?", name="conv")   an op of one of these types; each input
                    a handle (made by that op), a capture name ("c?": may be absent; the
                    same name twice: the same value) or "_" (anything)
    p.maybe(types, h, ...)     an op that may be there or not (taken when it is: `h` is what
                    stands for its output otherwise); above the anchor, only as its input's
                    single reader
    p.repeat(types, h)         zero or more one-input ops reading each other, above the anchor
    p.either(h1, h2, ...)      any one of these handles (below the anchor)

`where=fn(node, m)` on an op: a further condition, `m` holding what is matched so far.
Matching starts at the anchor (`anchor=True`, else the op the pattern returns) and goes
down to its producers, then up to the readers on the way to the returned op. Add, Mul, Max
and Min match their two inputs in either order.
"""
import functools

import onnx_ir as ir

from .. import graph as g

COMMUTATIVE = ("Add", "Mul", "Max", "Min")


class Rule:
    """A local rewrite (see the module's docstring). `refuse_partial`: a node the anchor
    matches but the rest of the pattern does not is refused (with where it failed), not
    passed over."""
    name = ""
    refuse_partial = False

    def pattern(self, p):
        raise NotImplementedError

    @functools.cached_property
    def matcher(self):
        """The pattern compiled (once per rule object)."""
        return _Matcher(self)

    def applies(self, m):
        """False: the rule leaves this match alone and says nothing."""
        return True

    def check(self, m):
        return None

    def rewrite(self, b, m):
        raise NotImplementedError


class _Op:
    def __init__(self, kind, types, inputs, name, domain, where):
        self.kind, self.inputs, self.name, self.domain, self.where = \
            kind, tuple(inputs), name, domain, where
        self.types = frozenset(types.split("|")) if types else frozenset()

    def fits(self, node):
        domain_ok = node.domain in g.STANDARD if self.domain == "" else \
            node.domain == self.domain
        return domain_ok and node.op_type in self.types


class Pattern:
    """The builder a rule's `pattern` describes its ops with (see the module's docstring)."""

    def __init__(self):
        self.ops, self.anchor = [], None

    def _add(self, kind, types, inputs, name=None, domain="", where=None, anchor=False):
        op = _Op(kind, types, inputs, name, domain, where)
        self.ops.append(op)
        if anchor:
            self.anchor = op
        return op

    def op(self, types, *inputs, name=None, domain="", where=None, anchor=False):
        return self._add("op", types, inputs, name, domain, where, anchor)

    def maybe(self, types, *inputs, name=None, domain="", where=None):
        return self._add("maybe", types, inputs, name, domain, where)

    def repeat(self, types, value, name=None, where=None):
        return self._add("repeat", types, (value,), name, "", where)

    def either(self, *handles):
        return self._add("either", "", handles)


class Match:
    """What a pattern found. `m.<name>`: the value or node captured under that name (None:
    an optional part that is absent; a list for a repeat); `nodes`: the matched nodes in
    the pattern's order; `anchor`; `output`: the value the match replaces; `root`: the node
    making it. Read-only."""
    __slots__ = ("_found", "nodes", "anchor", "output")

    def __init__(self, found, nodes, anchor, output):
        for key, value in (("_found", found), ("nodes", nodes), ("anchor", anchor),
                           ("output", output)):
            object.__setattr__(self, key, value)

    def __getattr__(self, name):
        try:
            return self._found[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("a Match is read-only")

    @property
    def root(self):
        return self.output.producer()

    @property
    def names(self):
        """The matched nodes' names joined by '+' (for descriptions)."""
        return "+".join(n.name for n in self.nodes)


class _Matcher:
    """A rule's pattern compiled: `match(node)` -> Match, a refusal (str) or None."""

    def __init__(self, rule):
        p = Pattern()
        self.root = rule.pattern(p)
        self.ops, self.anchor = p.ops, p.anchor or self.root
        self.declared = dict.fromkeys(
            [op.name for op in self.ops if op.name] +
            [i.rstrip("?") for op in self.ops for i in op.inputs
             if isinstance(i, str) and i.rstrip("?") != "_"])
        self.refuse_partial = rule.refuse_partial
        path = self._path(self.root)
        # the ops above the anchor, bottom-up, each with the handle below it
        self.chain = list(zip(path[1:], path[:-1]))
        if self.anchor.kind != "op" or any(h.kind == "either" for h, _ in self.chain):
            raise ValueError(f"{type(rule).__name__}: the anchor is not an op, or an "
                             "either() is above it")
        self.graph = self.why = None

    def _path(self, h):
        if h is self.anchor:
            return [h]
        for below in h.inputs:
            path = self._path(below) if isinstance(below, _Op) else None
            if path:
                return path + [h]
        return None

    def match(self, node):
        if not self.anchor.fits(node) or not node.outputs:
            return None
        self.graph, self.why = node.graph, None
        for s in self._node(self.anchor, node, {}):
            for done in self._up(self.chain, s):
                return self._result(done)
        return self.why if self.refuse_partial else None

    def _result(self, s):
        nodes = []
        for op in self.ops:
            found = s.get(op, (None, None))[0]
            nodes.extend(found if isinstance(found, list) else [found] if found else [])
        return Match(self._found(s), nodes, s[self.anchor][0], s[self.root][1])

    def _found(self, s):
        return {**self.declared, **{k: v for k, v in s.items() if isinstance(k, str)}}

    def _miss(self, text):
        if self.why is None:
            self.why = text

    @staticmethod
    def _bound(s, node):
        return any(node is n or isinstance(n, list) and node in n
                   for n, _ in (v for k, v in s.items() if isinstance(k, _Op)))

    def _bind(self, s, h, node, value):
        s = dict(s)
        s[h] = (node, value)
        if h.name:
            s[h.name] = node
        return s

    def _node(self, h, node, s):
        """States where op handle `h` is `node` (its output 0), inputs and condition met."""
        if self._bound(s, node):
            return
        s = self._bind(s, h, node, node.outputs[0])
        vals, pats = list(node.inputs), h.inputs
        if len(vals) > len(pats):
            self._miss(f"{node.name} has more inputs than the pattern's {node.op_type}")
            return
        orders = [vals, vals[::-1]] if node.op_type in COMMUTATIVE and len(vals) == 2 \
            else [vals]
        orders = [order + [None] * (len(pats) - len(vals)) for order in orders]
        for order in orders:
            for done in self._all(list(zip(pats, order)), s):
                if h.where is None or h.where(node, self._partial(done)):
                    yield done
                else:
                    self._miss(f"{node.name} ({node.op_type}) is not of the pattern's form")

    def _partial(self, s):
        return Match(self._found(s), [], None, None)

    def _all(self, pairs, s):
        if not pairs:
            yield s
            return
        (h, v), rest = pairs[0], pairs[1:]
        for s2 in self._down(h, v, s):
            yield from self._all(rest, s2)

    def _down(self, h, v, s):
        """States where handle `h` stands for value `v` (matching producers)."""
        if isinstance(h, str):
            key, optional = h.rstrip("?"), h.endswith("?")
            if v is None and not optional:
                return
            if key == "_":
                yield s
            elif key not in s:
                yield {**s, key: v}
            elif s[key] is v:
                yield s
            return
        if h in s:
            if s[h][1] is v:
                yield s
            return
        if h.kind == "either":
            for alt in h.inputs:
                yield from self._down(alt, v, s)
            return
        node = v.producer() if v is not None else None
        fits = node is not None and node.graph is self.graph and h.fits(node) and \
            node.outputs[0] is v
        if h.kind == "maybe":
            present = list(self._node(h, node, s)) if fits else []
            for s2 in present or self._absent(h, v, s):
                yield s2
            return
        if fits:
            yield from self._node(h, node, s)
        elif v is not None:
            types = " or ".join(sorted(h.types))
            self._miss(f"{v.name} comes from {node.op_type} ({node.name}), not {types}"
                       if node is not None else
                       f"{v.name} is a model input or a constant, not made by {types}")

    def _absent(self, h, v, s):
        s = self._bind(s, h, None, v)
        return list(self._down(h.inputs[0], v, s))

    def _up(self, chain, s):
        """States extended by the ops above the anchor, each reading the one below."""
        if not chain:
            yield s
            return
        (h, below), rest = chain[0], chain[1:]
        cur = s[below][1]
        if h.kind == "op":
            for node in g.users(cur):
                if self._fits(h, node, s):
                    for s2 in self._node(h, node, s):
                        yield from self._up(rest, s2)
            return
        if h.kind == "repeat":
            nodes, node = [], g.single_user(cur)
            while self._fits(h, node, s) and node.inputs[0] is cur and \
                    (h.where is None or h.where(node, self._partial(s))):
                nodes.append(node)
                cur = node.outputs[0]
                node = g.single_user(cur)
            yield from self._up(rest, self._bind(s, h, nodes, cur))
            return
        node = g.single_user(cur)                   # maybe: its input's only reader
        present = list(self._node(h, node, s)) if self._fits(h, node, s) else []
        for s2 in present or [self._bind(s, h, None, cur)]:
            yield from self._up(rest, s2)

    def _fits(self, h, node, s):
        """Whether a reader found going up may be `h`'s node."""
        return node is not None and node.graph is self.graph and h.fits(node) and \
            bool(node.outputs) and not self._bound(s, node)


class Build(g.Builder):
    """The builder a rewrite makes its nodes with: they are inserted for it."""

    def __init__(self, graph):
        super().__init__(graph)
        self.made = []

    def node(self, op_type, inputs, attrs=None, name=None, shape=None, dtype=None,
             domain=""):
        node = super().node(op_type, inputs, attrs, name, shape, dtype, domain)
        self.made.append(node)
        return node

    def like(self, node, inputs, attrs):
        """The op of `node` (its name and metadata too) on other inputs and attributes."""
        new = ir.Node(node.domain, node.op_type, inputs, attrs, name=node.name,
                      metadata_props=dict(node.metadata_props))
        self.made.append(new)
        return new

    def initializer(self, array, name):
        return g.initializer(self.graph, array, name)


def shared(m):
    """Why a match must stay as it is: a value inside it is read from outside."""
    inside = set(m.nodes)
    for node in m.nodes:
        for v in node.outputs:
            if v is m.output:
                continue
            if v.is_graph_output():
                return f"{node.name}'s output {v.name} is also a model output"
            if any(u not in inside for u in g.users(v)):
                return f"{node.name}'s output {v.name} is also read elsewhere"
    return None


def replace(b, rule, m):
    """Rewrite one match; returns the rule's description."""
    graph = b.graph
    b.made = []
    value, text = rule.rewrite(b, m)
    if value.producer() not in b.made:          # it takes the replaced value's name
        raise ValueError(f"{type(rule).__name__}.rewrite returned a value it did not make")
    graph.insert_before(m.root, b.made)
    g.inherit_marks(m.nodes, b.made)
    read = [v for n in m.nodes for v in n.inputs if v is not None]
    g.take_over(m.output, value)
    g.drop_dead(graph, m.nodes)
    g.drop_unread_initializers(graph, read)
    return text


def apply_rules(graph, rules, result, restart=False):
    """Every rule at every node of `graph`, in order; what fired and what was refused go to
    `result`. `restart`: scan again from the top after each rewrite until nothing fires; a
    node rewritten after it was refused is then no longer listed as refused."""
    b = Build(graph)
    again = True
    while again:
        again = False
        for node in list(graph):
            if node.graph is not graph:
                continue
            for rule in rules:
                m = rule.matcher.match(node)
                if m is None or isinstance(m, Match) and not rule.applies(m):
                    continue
                why = m if isinstance(m, str) else shared(m) or rule.check(m)
                if why is not None:
                    result.refused[node.name] = why
                    continue
                result.fired.append(replace(b, rule, m))
                again = restart
                break
            if again:
                break
    if restart:
        alive = {n.name for n in graph}
        for name in [n for n in result.refused if n not in alive]:
            del result.refused[name]
