"""Go's regexp parser (Go 1.26 src/regexp/syntax/parse.go), ported to tell exactly which
patterns Go's ``regexp.Compile`` refuses, and why. Pure.

Kata's Go runtime searches a pod's hypervisor annotations with ``enable_annotations``'
patterns (src/runtime/pkg/oci/utils.go ``regexpContains``: ``regexp.MatchString``, its
error dropped), so a pattern Go refuses allows nothing. kata-mem matches with RE2 (Google's
C++ library, which Go's package was written from: kata_mem.core.golang), but RE2 does not
refuse what Go does: Go also stops a parse tree taller than 1000 (``maxHeight``:
"expression nests too deeply", ``ErrNestingDepth``), one whose program would exceed
``maxSize`` instructions or whose character classes hold more than ``maxRunes`` runes
("expression too large", ``ErrLarge``), and writes its own words for every other error;
RE2 refuses large programs Go accepts. So this module decides, as Go's own parser does,
node by node: the limits depend on the tree Go builds (literals merged, alternations
factored, each check made as each node is pushed, with Go's memoised sizes), and the tree
on Go's Unicode tables (``data/go-unicode.json`` beside this module, written from Go's
package unicode by scripts/write_go_unicode.py), which are read only when a pattern folds
case or names a Unicode class. Reading that file is the one thing this module takes from
outside its code: it is part of the package, as the module's own bytecode is.

One module (about 1,400 lines) because it is one parser: every function is a piece of Go's,
under Go's name in snake case, in Go's order, and the limits are only right if all of it
is. Go's recursion (``collapse`` and ``factor``, the size, height and equality walks) runs
here as generators on an explicit stack (:func:`_run`), so that a deep pattern costs
memory, as it does in Go, rather than Python's recursion limit. Only the parse is ported:
``regexp.Compile``'s later steps (``Simplify``, ``Compile``) refuse nothing.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
from collections.abc import Generator
from typing import Any, Optional, Union

from kata_mem.core.values import Frozen

# -- Op (regexp.go): in Go's order, which the parser compares -------------------------------
NO_MATCH = 1
EMPTY_MATCH = 2
LITERAL = 3
CHAR_CLASS = 4
ANY_CHAR_NOT_NL = 5
ANY_CHAR = 6
BEGIN_LINE = 7
END_LINE = 8
BEGIN_TEXT = 9
END_TEXT = 10
WORD_BOUNDARY = 11
NO_WORD_BOUNDARY = 12
CAPTURE = 13
STAR = 14
PLUS = 15
QUEST = 16
REPEAT = 17
CONCAT = 18
ALTERNATE = 19
PSEUDO = 128  # opPseudo: where the parse stack's markers start
LEFT_PAREN = PSEUDO
VERTICAL_BAR = PSEUDO + 1

# -- Flags (parse.go): a uint16 -------------------------------------------------------------
FOLD_CASE = 1
CLASS_NL = 4
DOT_NL = 8
ONE_LINE = 16
NON_GREEDY = 32
PERL_X = 64
UNICODE_GROUPS = 128
WAS_DOLLAR = 256
_FLAGS16 = 0xFFFF
#: ``syntax.Perl``, what ``regexp.Compile`` parses with.
PERL = CLASS_NL | ONE_LINE | PERL_X | UNICODE_GROUPS

# -- the limits (parse.go) ------------------------------------------------------------------
MAX_HEIGHT = 1000
MAX_SIZE = (128 << 20) // 40  # maxSize: 128 MiB of 40-byte Insts
MAX_RUNES = (128 << 20) // 4  # maxRunes: 128 MiB of runes
MAX_RUNE = 0x10FFFF
_MIN_FOLD, _MAX_FOLD = 0x0041, 0x1E943
_REPEAT_LIMIT = 1000  # parse's {n,m} bound and repeatIsValid's copies

# -- ErrorCode (parse.go) -------------------------------------------------------------------
ERR_INVALID_CHAR_RANGE = "invalid character class range"
ERR_INVALID_ESCAPE = "invalid escape sequence"
ERR_INVALID_NAMED_CAPTURE = "invalid named capture"
ERR_INVALID_PERL_OP = "invalid or unsupported Perl syntax"
ERR_INVALID_REPEAT_OP = "invalid nested repetition operator"
ERR_INVALID_REPEAT_SIZE = "invalid repeat count"
ERR_MISSING_BRACKET = "missing closing ]"
ERR_MISSING_PAREN = "missing closing )"
ERR_MISSING_REPEAT_ARGUMENT = "missing argument to repetition operator"
ERR_TRAILING_BACKSLASH = "trailing backslash at end of expression"
ERR_UNEXPECTED_PAREN = "unexpected )"
ERR_NESTING_DEPTH = "expression nests too deeply"
ERR_LARGE = "expression too large"


class GoSyntaxError(Frozen):
    """Go's ``*syntax.Error``: its code and the expression it names."""

    code: str
    expr: str

    def __str__(self) -> str:
        """As Go's ``Error()`` writes it (``regexp.Compile``'s error)."""
        return f"error parsing regexp: {self.code}: `{self.expr}`"


class _Error(Exception):
    def __init__(self, code: str, expr: str) -> None:
        super().__init__(code)
        self.error = GoSyntaxError(code, expr)


class _Limit(Exception):
    """Go's ``panic(ErrLarge)`` or ``panic(ErrNestingDepth)``: ``parse`` turns it into an
    error naming the whole pattern."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class _Re:
    """A ``*Regexp`` (regexp.go): a node, compared by identity as Go compares pointers."""

    __slots__ = ("cap", "flags", "max", "min", "name", "op", "rune", "sub")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """``*re = Regexp{}``."""
        self.op = 0
        self.flags = 0
        self.sub: list[_Re] = []
        self.rune: list[int] = []
        self.min = 0
        self.max = 0
        self.cap = 0
        self.name = ""


#: A piece of Go's recursion: yields the generators it calls, receives their results.
_Gen = Generator[Any, Any, Any]


def _run(gen: _Gen) -> Any:
    """Run a generator that yields the generators it calls (Go's recursion) and receives
    their results, on an explicit stack."""
    stack = [gen]
    value: Any = None
    while True:
        try:
            call = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            value = done.value
            continue
        stack.append(call)
        value = None


# -- Unicode (Go's package unicode, from data/go-unicode.json) ------------------------------
#: Go's tables, shipped in the package (pyproject's package-data).
GO_UNICODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "go-unicode.json")


@functools.lru_cache(maxsize=1)
def go_unicode() -> dict[str, Any]:
    """Go's Unicode tables (scripts/write_go_unicode.py says what each key holds), read
    once a process, when a pattern first needs them."""
    with open(GO_UNICODE, "rb") as data:
        tables: dict[str, Any] = json.load(data)
    return tables


@functools.lru_cache(maxsize=1)
def _folds() -> dict[int, int]:
    pairs = (pair.split(":") for pair in go_unicode()["folds"].split())
    return {int(r, 16): int(f, 16) for r, f in pairs}


def simple_fold(r: int) -> int:
    """Go's ``unicode.SimpleFold``: the next rune of ``r``'s case-folding orbit."""
    return _folds().get(r, r)


_Table = tuple[tuple[int, int, int], ...]


@functools.lru_cache(maxsize=512)
def _table(text: str) -> _Table:
    triples = (t.split(",") for t in text.split())
    return tuple((int(lo, 16), int(hi, 16), int(stride, 16)) for lo, hi, stride in triples)


_ANY_TABLE: _Table = ((0, 0xFFFF, 1), (0x10000, MAX_RUNE, 1))
_ASCII_TABLE: _Table = ((0, 0x7F, 1),)
_ASCII_FOLD_TABLE: _Table = ((0, 0x7F, 1), (0x017F, 0x017F, 1), (0x212A, 0x212A, 1))


def _canonical_name(name: str) -> str:
    """``canonicalName``: a leading upper-case letter, then lower case, without ``_``,
    ``-`` or spaces (ASCII only, byte by byte)."""
    out: list[str] = []
    first = True
    for c in name:
        if c in "_- ":
            continue
        if first:
            out.append(c.upper() if "a" <= c <= "z" else c)
            first = False
        else:
            out.append(c.lower() if "A" <= c <= "Z" else c)
    return "".join(out)


def _unicode_table(name: str) -> tuple[Optional[_Table], Optional[_Table], int]:
    """``unicodeTable``: the table a ``\\p`` name gives, its fold table, and its sign."""
    u = go_unicode()
    name = _canonical_name(name)
    if name == "Any":
        return _ANY_TABLE, _ANY_TABLE, +1
    if name == "Assigned":
        return _table(u["cn"]), _table(u["cn"]), -1
    if name == "Ascii":
        return _ASCII_TABLE, _ASCII_FOLD_TABLE, +1
    if name == "Lc":
        name = "LC"
    categories, fold_category = u["categories"], u["fold_category"]
    for tables, folds in ((categories, fold_category), (u["scripts"], u["fold_script"])):
        if name in tables:
            fold = folds.get(name)
            return _table(tables[name]), None if fold is None else _table(fold), +1
        if name == "LC":  # the one non-canonical key: Categories only
            break
    actual = {_canonical_name(k): v for k, v in u["category_aliases"].items()}.get(name)
    if actual:
        fold = fold_category.get(actual)
        return _table(categories[actual]), None if fold is None else _table(fold), +1
    return None, None, 0


# -- perl_groups.go -------------------------------------------------------------------------
_CODE_D = (0x30, 0x39)
_CODE_S = (0x9, 0xA, 0xC, 0xD, 0x20, 0x20)
_CODE_W = (0x30, 0x39, 0x41, 0x5A, 0x5F, 0x5F, 0x61, 0x7A)
_Group = tuple[int, tuple[int, ...]]
_PERL_GROUP: dict[str, _Group] = {
    "\\d": (+1, _CODE_D),
    "\\D": (-1, _CODE_D),
    "\\s": (+1, _CODE_S),
    "\\S": (-1, _CODE_S),
    "\\w": (+1, _CODE_W),
    "\\W": (-1, _CODE_W),
}
_POSIX_CODES: dict[str, tuple[int, ...]] = {
    "alnum": (0x30, 0x39, 0x41, 0x5A, 0x61, 0x7A),
    "alpha": (0x41, 0x5A, 0x61, 0x7A),
    "ascii": (0x0, 0x7F),
    "blank": (0x9, 0x9, 0x20, 0x20),
    "cntrl": (0x0, 0x1F, 0x7F, 0x7F),
    "digit": (0x30, 0x39),
    "graph": (0x21, 0x7E),
    "lower": (0x61, 0x7A),
    "print": (0x20, 0x7E),
    "punct": (0x21, 0x2F, 0x3A, 0x40, 0x5B, 0x60, 0x7B, 0x7E),
    "space": (0x9, 0xD, 0x20, 0x20),
    "upper": (0x41, 0x5A),
    "word": (0x30, 0x39, 0x41, 0x5A, 0x5F, 0x5F, 0x61, 0x7A),
    "xdigit": (0x30, 0x39, 0x41, 0x46, 0x61, 0x66),
}
_POSIX_GROUP: dict[str, _Group] = {
    **{f"[:{name}:]": (+1, code) for name, code in _POSIX_CODES.items()},
    **{f"[:^{name}:]": (-1, code) for name, code in _POSIX_CODES.items()},
}


# -- character classes (parse.go, from cleanClass on) ---------------------------------------
def _clean_class(r: list[int]) -> list[int]:
    """``cleanClass``: sorted by lo, then hi decreasing; overlapping or abutting merged."""
    return list(_cleaned(tuple(r)))


@functools.lru_cache(maxsize=1024)
def _cleaned(r: tuple[int, ...]) -> tuple[int, ...]:
    # Memoised: a pattern that repeats a large class ([\pL] thousands of times) cleans
    # the same ranges each time.
    pairs = sorted(zip(r[0::2], r[1::2], strict=False), key=lambda p: (p[0], -p[1]))
    out: list[int] = []
    for lo, hi in pairs:
        if out and lo <= out[-1] + 1:
            out[-1] = max(out[-1], hi)
            continue
        out += (lo, hi)
    return tuple(out)


def _append_literal(r: list[int], x: int, flags: int) -> list[int]:
    if flags & FOLD_CASE:
        return _append_folded_range(r, x, x)
    return _append_range(r, x, x)


def _append_range(r: list[int], lo: int, hi: int) -> list[int]:
    """``appendRange``: expand the last or next to last range when it overlaps or abuts."""
    n = len(r)
    for i in (2, 4):
        if n >= i:
            rlo, rhi = r[n - i], r[n - i + 1]
            if lo <= rhi + 1 and rlo <= hi + 1:
                if lo < rlo:
                    r[n - i] = lo
                if hi > rhi:
                    r[n - i + 1] = hi
                return r
    r += (lo, hi)
    return r


#: From this many runes on, a folded range is appended by its set of runes (the range,
#: then each fold of a rune in it) rather than rune by rune as Go does: the same runes in
#: another order, which only the callers that clean the class afterwards get
#: (``parseClass``, ``appendGroup``); a single rune (``mergeCharClass``) is Go's order.
_FOLD_BY_SET = 64


def _append_folded_range(r: list[int], lo: int, hi: int) -> list[int]:
    if hi - lo >= _FOLD_BY_SET:
        return _append_folded_set(r, lo, hi)
    if lo <= _MIN_FOLD and hi >= _MAX_FOLD:
        return _append_range(r, lo, hi)
    if hi < _MIN_FOLD or lo > _MAX_FOLD:
        return _append_range(r, lo, hi)
    if lo < _MIN_FOLD:
        r = _append_range(r, lo, _MIN_FOLD - 1)
        lo = _MIN_FOLD
    if hi > _MAX_FOLD:
        r = _append_range(r, _MAX_FOLD + 1, hi)
        hi = _MAX_FOLD
    for c in range(lo, hi + 1):
        r = _append_range(r, c, c)
        f = simple_fold(c)
        while f != c:
            r = _append_range(r, f, f)
            f = simple_fold(f)
    return r


def _append_folded_set(r: list[int], lo: int, hi: int) -> list[int]:
    """The runes :func:`_append_folded_range` appends, as a set: ``lo``-``hi`` and the
    fold orbit of every rune in it that folds (``SimpleFold`` moves it)."""
    r = _append_range(r, lo, hi)
    keys = _fold_keys()
    for c in keys[bisect.bisect_left(keys, max(lo, _MIN_FOLD)) : bisect.bisect_right(keys, hi)]:
        if c > _MAX_FOLD:
            break
        f = simple_fold(c)
        while f != c:
            if not lo <= f <= hi:
                r += (f, f)
            f = simple_fold(f)
    return r


@functools.lru_cache(maxsize=1)
def _fold_keys() -> list[int]:
    return sorted(_folds())


def _append_class(r: list[int], x: Union[list[int], tuple[int, ...]]) -> list[int]:
    for i in range(0, len(x), 2):
        r = _append_range(r, x[i], x[i + 1])
    return r


def _append_folded_class(r: list[int], x: Union[list[int], tuple[int, ...]]) -> list[int]:
    for i in range(0, len(x), 2):
        r = _append_folded_range(r, x[i], x[i + 1])
    return r


def _append_negated_class(r: list[int], x: Union[list[int], tuple[int, ...]]) -> list[int]:
    next_lo = 0
    for i in range(0, len(x), 2):
        lo, hi = x[i], x[i + 1]
        if next_lo <= lo - 1:
            r = _append_range(r, next_lo, lo - 1)
        next_lo = hi + 1
    if next_lo <= MAX_RUNE:
        r = _append_range(r, next_lo, MAX_RUNE)
    return r


def _append_table(r: list[int], x: _Table) -> list[int]:
    for lo, hi, stride in x:
        if stride == 1:
            r = _append_range(r, lo, hi)
            continue
        for c in range(lo, hi + 1, stride):
            r = _append_range(r, c, c)
    return r


def _append_negated_table(r: list[int], x: _Table) -> list[int]:
    next_lo = 0
    for lo, hi, stride in x:
        if stride == 1:
            if next_lo <= lo - 1:
                r = _append_range(r, next_lo, lo - 1)
            next_lo = hi + 1
            continue
        for c in range(lo, hi + 1, stride):
            if next_lo <= c - 1:
                r = _append_range(r, next_lo, c - 1)
            next_lo = c + 1
    if next_lo <= MAX_RUNE:
        r = _append_range(r, next_lo, MAX_RUNE)
    return r


def _negate_class(r: list[int]) -> list[int]:
    out: list[int] = []
    next_lo = 0
    for i in range(0, len(r), 2):
        lo, hi = r[i], r[i + 1]
        if next_lo <= lo - 1:
            out += (next_lo, lo - 1)
        next_lo = hi + 1
    if next_lo <= MAX_RUNE:
        out += (next_lo, MAX_RUNE)
    return out


@functools.lru_cache(maxsize=256)
def _unicode_class(name: str, sign: int, fold_case: bool) -> Optional[tuple[int, ...]]:
    """What ``parseUnicodeClass`` appends to an empty class for ``\\p{name}`` (``sign``
    -1: ``\\P``), in Go's order; None for a name Go does not know. Memoised: a table is
    hundreds of ranges, and a pattern may name it thousands of times."""
    tab, fold, table_sign = _unicode_table(name)
    if tab is None:
        return None
    if table_sign < 0:
        sign = -sign
    if not fold_case or fold is None:
        if sign > 0:
            return tuple(_append_table([], tab))
        return tuple(_append_negated_table([], tab))
    tmp = _clean_class(_append_table(_append_table([], tab), fold))
    if sign > 0:
        return tuple(_append_class([], tmp))
    return tuple(_append_negated_class([], tmp))


def _is_char_class(re: _Re) -> bool:
    return (re.op == LITERAL and len(re.rune) == 1) or re.op in (
        CHAR_CLASS,
        ANY_CHAR_NOT_NL,
        ANY_CHAR,
    )


def _match_rune(re: _Re, r: int) -> bool:
    if re.op == LITERAL:
        return len(re.rune) == 1 and re.rune[0] == r
    if re.op == CHAR_CLASS:
        return any(re.rune[i] <= r <= re.rune[i + 1] for i in range(0, len(re.rune), 2))
    if re.op == ANY_CHAR_NOT_NL:
        return r != ord("\n")
    return re.op == ANY_CHAR


def _merge_char_class(dst: _Re, src: _Re) -> None:
    """``mergeCharClass``: dst = dst|src, dst the more complex."""
    if dst.op == ANY_CHAR_NOT_NL:
        if _match_rune(src, ord("\n")):
            dst.op = ANY_CHAR
    elif dst.op == CHAR_CLASS:
        if src.op == LITERAL:
            dst.rune = _append_literal(dst.rune, src.rune[0], src.flags)
        else:
            dst.rune = _append_class(dst.rune, src.rune)
    elif dst.op == LITERAL:
        if src.rune[0] == dst.rune[0] and src.flags == dst.flags:
            return
        dst.op = CHAR_CLASS
        first = dst.rune[0]
        dst.rune = _append_literal([], first, dst.flags)
        dst.rune = _append_literal(dst.rune, src.rune[0], src.flags)


def _clean_alt(re: _Re) -> None:
    """``cleanAlt``: a class cleaned for an alternation; all of the runes is ``.``."""
    if re.op == CHAR_CLASS:
        re.rune = _clean_class(re.rune)
        if re.rune == [0, MAX_RUNE]:
            re.rune = []
            re.op = ANY_CHAR
        elif re.rune == [0, ord("\n") - 1, ord("\n") + 1, MAX_RUNE]:
            re.rune = []
            re.op = ANY_CHAR_NOT_NL


def _equal(x: Optional[_Re], y: Optional[_Re]) -> _Gen:
    """``(*Regexp).Equal``: identical structure."""
    if x is None or y is None:
        return x is y
    if x.op != y.op:
        return False
    op = x.op
    if op == END_TEXT:
        if x.flags & WAS_DOLLAR != y.flags & WAS_DOLLAR:
            return False
    elif op in (LITERAL, CHAR_CLASS):
        return x.flags & FOLD_CASE == y.flags & FOLD_CASE and x.rune == y.rune
    elif op in (ALTERNATE, CONCAT):
        if len(x.sub) != len(y.sub):
            return False
        for a, b in zip(x.sub, y.sub, strict=True):
            if not (yield _equal(a, b)):
                return False
    elif op in (STAR, PLUS, QUEST):
        if x.flags & NON_GREEDY != y.flags & NON_GREEDY or not (yield _equal(x.sub[0], y.sub[0])):
            return False
    elif op == REPEAT:
        if (
            x.flags & NON_GREEDY != y.flags & NON_GREEDY
            or x.min != y.min
            or x.max != y.max
            or not (yield _equal(x.sub[0], y.sub[0]))
        ):
            return False
    elif op == CAPTURE and (
        x.cap != y.cap or x.name != y.name or not (yield _equal(x.sub[0], y.sub[0]))
    ):
        return False
    return True


def _repeat_is_valid(re: _Re, n: int) -> _Gen:
    """``repeatIsValid``: the repetition and those inside it make at most ``n`` copies."""
    if re.op == REPEAT:
        m = re.max
        if m == 0:
            return True
        if m < 0:
            m = re.min
        if m > n:
            return False
        if m > 0:
            n //= m
    for sub in re.sub:
        if not (yield _repeat_is_valid(sub, n)):
            return False
    return True


# -- the parser ------------------------------------------------------------------------------
class _Parser:
    """Go's ``parser``: the stack, the free list and the counts the limits are checked on."""

    def __init__(self, flags: int, whole: str) -> None:
        self.flags = flags
        self.stack: list[_Re] = []
        self.free: list[_Re] = []
        self.num_cap = 0
        self.whole = whole
        self.num_regexp = 0
        self.num_runes = 0
        self.repeats = 0
        self.height: Optional[dict[_Re, int]] = None
        self.size: Optional[dict[_Re, int]] = None

    def new_regexp(self, op: int) -> _Re:
        if self.free:
            re = self.free.pop()
            re.reset()
        else:
            re = _Re()
            self.num_regexp += 1
        re.op = op
        return re

    def reuse(self, re: _Re) -> None:
        # Go forgets the height of a reused node, not its size (parse.go ``reuse``): a
        # recycled node's size stays memoised, and the limits are Go's with it.
        if self.height is not None:
            self.height.pop(re, None)
        self.free.append(re)

    # -- limits -------------------------------------------------------------------------------
    def check_limits(self, re: _Re) -> None:
        if self.num_runes > MAX_RUNES:
            raise _Limit(ERR_LARGE)
        self.check_size(re)
        self.check_height(re)

    def check_size(self, re: _Re) -> None:
        if self.size is None:
            if self.repeats == 0:
                self.repeats = 1
            if re.op == REPEAT:
                n = re.max
                if n == -1:
                    n = re.min
                if n <= 0:
                    n = 1
                if n > MAX_SIZE // self.repeats:
                    self.repeats = MAX_SIZE
                else:
                    self.repeats *= n
            if self.num_regexp < MAX_SIZE // self.repeats:
                return
            self.size = {}
            for item in self.stack:
                self.check_size(item)
        if _run(self.calc_size(re, True)) > MAX_SIZE:
            raise _Limit(ERR_LARGE)

    def calc_size(self, re: _Re, force: bool) -> _Gen:
        assert self.size is not None
        if not force and re in self.size:
            return self.size[re]
        size = 0
        op = re.op
        if op == LITERAL:
            size = len(re.rune)
        elif op in (CAPTURE, STAR):
            size = 2 + (yield self.calc_size(re.sub[0], False))
        elif op in (PLUS, QUEST):
            size = 1 + (yield self.calc_size(re.sub[0], False))
        elif op in (CONCAT, ALTERNATE):
            for child in re.sub:
                size += yield self.calc_size(child, False)
            if op == ALTERNATE and len(re.sub) > 1:
                size += len(re.sub) - 1
        elif op == REPEAT:
            inner: int = yield self.calc_size(re.sub[0], False)
            if re.max == -1:
                size = 2 + inner if re.min == 0 else 1 + re.min * inner  # x* or xxx+
            else:
                size = re.max * inner + (re.max - re.min)  # x{2,5} = xx(x(x(x)?)?)?
        size = max(1, size)
        self.size[re] = size
        return size

    def check_height(self, re: _Re) -> None:
        if self.num_regexp < MAX_HEIGHT:
            return
        if self.height is None:
            self.height = {}
            for item in self.stack:
                self.check_height(item)
        if _run(self.calc_height(re, True)) > MAX_HEIGHT:
            raise _Limit(ERR_NESTING_DEPTH)

    def calc_height(self, re: _Re, force: bool) -> _Gen:
        assert self.height is not None
        if not force and re in self.height:
            return self.height[re]
        h = 1
        for sub in re.sub:
            hsub: int = yield self.calc_height(sub, False)
            h = max(h, 1 + hsub)
        self.height[re] = h
        return h

    # -- the stack ------------------------------------------------------------------------
    def push(self, re: _Re) -> Optional[_Re]:
        self.num_runes += len(re.rune)
        r = re.rune
        if re.op == CHAR_CLASS and len(r) == 2 and r[0] == r[1]:
            if self.maybe_concat(r[0], self.flags & ~FOLD_CASE):
                return None
            re.op = LITERAL
            re.rune = r[:1]
            re.flags = self.flags & ~FOLD_CASE
        elif (
            re.op == CHAR_CLASS
            and len(r) == 4
            and r[0] == r[1]
            and r[2] == r[3]
            and simple_fold(r[0]) == r[2]
            and simple_fold(r[2]) == r[0]
        ) or (
            re.op == CHAR_CLASS
            and len(r) == 2
            and r[0] + 1 == r[1]
            and simple_fold(r[0]) == r[1]
            and simple_fold(r[1]) == r[0]
        ):
            if self.maybe_concat(r[0], self.flags | FOLD_CASE):
                return None
            re.op = LITERAL
            re.rune = r[:1]
            re.flags = self.flags | FOLD_CASE
        else:
            self.maybe_concat(-1, 0)
        self.stack.append(re)
        self.check_limits(re)
        return re

    def maybe_concat(self, r: int, flags: int) -> bool:
        if len(self.stack) < 2:
            return False
        re1, re2 = self.stack[-1], self.stack[-2]
        if re1.op != LITERAL or re2.op != LITERAL or re1.flags & FOLD_CASE != re2.flags & FOLD_CASE:
            return False
        re2.rune = re2.rune + re1.rune
        if r >= 0:
            re1.rune = [r]
            re1.flags = flags
            return True
        self.stack.pop()
        self.reuse(re1)
        return False

    def literal(self, r: int) -> None:
        re = self.new_regexp(LITERAL)
        re.flags = self.flags
        if self.flags & FOLD_CASE:
            r = _min_fold_rune(r)
        re.rune = [r]
        self.push(re)

    def op(self, op: int) -> _Re:
        re = self.new_regexp(op)
        re.flags = self.flags
        pushed = self.push(re)
        assert pushed is not None  # only a char class can merge away
        return pushed

    def repeat(self, op: int, lo: int, hi: int, before: int, after: int, last_repeat: int) -> int:
        """``repeat``: the top of the stack repeated; ``before`` is where the operator
        starts, ``after`` where it ends, ``last_repeat`` where the operator just before it
        started (-1: none). Returns where the parse goes on."""
        s = self.whole
        flags = self.flags
        if self.flags & PERL_X:
            if s[after : after + 1] == "?":
                after += 1
                flags ^= NON_GREEDY
            if last_repeat >= 0:  # a** is an error in Perl, a++ something else
                raise _Error(ERR_INVALID_REPEAT_OP, s[last_repeat:after])
        if not self.stack or self.stack[-1].op >= PSEUDO:
            raise _Error(ERR_MISSING_REPEAT_ARGUMENT, s[before:after])
        sub = self.stack[-1]
        re = self.new_regexp(op)
        re.min, re.max, re.flags = lo, hi, flags
        re.sub = [sub]
        self.stack[-1] = re
        self.check_limits(re)
        if op == REPEAT and (lo >= 2 or hi >= 2) and not _run(_repeat_is_valid(re, _REPEAT_LIMIT)):
            raise _Error(ERR_INVALID_REPEAT_SIZE, s[before:after])
        return after

    def concat(self) -> None:
        """``concat``: the stack above the topmost ``|`` or ``(`` as one concatenation."""
        self.maybe_concat(-1, 0)
        i = len(self.stack)
        while i > 0 and self.stack[i - 1].op < PSEUDO:
            i -= 1
        subs = self.stack[i:]
        del self.stack[i:]
        if not subs:
            self.push(self.new_regexp(EMPTY_MATCH))
        else:
            self.push(_run(self.collapse(subs, CONCAT)))

    def alternate(self) -> None:
        """``alternate``: the stack above the topmost ``(`` as one alternation."""
        i = len(self.stack)
        while i > 0 and self.stack[i - 1].op < PSEUDO:
            i -= 1
        subs = self.stack[i:]
        del self.stack[i:]
        if subs:
            _clean_alt(subs[-1])
        if not subs:
            self.push(self.new_regexp(NO_MATCH))
        else:
            self.push(_run(self.collapse(subs, ALTERNATE)))

    def collapse(self, subs: list[_Re], op: int) -> _Gen:
        if len(subs) == 1:
            return subs[0]
        re = self.new_regexp(op)
        re.sub = []
        for sub in subs:
            if sub.op == op:
                re.sub += sub.sub
                self.reuse(sub)
            else:
                re.sub.append(sub)
        if op == ALTERNATE:
            re.sub = yield self.factor(re.sub)
            if len(re.sub) == 1:
                old = re
                re = re.sub[0]
                self.reuse(old)
        return re

    def factor(self, sub: list[_Re]) -> _Gen:
        """``factor``: common leading literals, then common leading pieces, factored out;
        runs of single runes and classes made one class; runs of empty matches one."""
        if len(sub) < 2:
            return sub
        # Round 1: common literal prefixes.
        out: list[_Re] = []
        text: list[int] = []
        text_flags = 0
        start = 0
        for i in range(len(sub) + 1):
            itext: list[int] = []
            iflags = 0
            if i < len(sub):
                itext, iflags = _leading_string(sub[i])
                if iflags == text_flags:
                    same = 0
                    while same < len(text) and same < len(itext) and text[same] == itext[same]:
                        same += 1
                    if same > 0:
                        text = text[:same]
                        continue
            if i == start:
                pass
            elif i == start + 1:
                out.append(sub[start])
            else:
                prefix = self.new_regexp(LITERAL)
                prefix.flags = text_flags
                prefix.rune = list(text)
                for j in range(start, i):
                    sub[j] = self.remove_leading_string(sub[j], len(text))
                    self.check_limits(sub[j])
                suffix = yield self.collapse(sub[start:i], ALTERNATE)
                re = self.new_regexp(CONCAT)
                re.sub = [prefix, suffix]
                out.append(re)
            start = i
            text = list(itext)
            text_flags = iflags
        sub = out

        # Round 2: common simple leading pieces (a class, or a fixed repeat of one).
        out = []
        start = 0
        first: Optional[_Re] = None
        for i in range(len(sub) + 1):
            ifirst: Optional[_Re] = None
            if i < len(sub):
                ifirst = _leading_regexp(sub[i])
                if (
                    first is not None
                    and (yield _equal(first, ifirst))
                    and (
                        _is_char_class(first)
                        or (
                            first.op == REPEAT
                            and first.min == first.max
                            and _is_char_class(first.sub[0])
                        )
                    )
                ):
                    continue
            if i == start:
                pass
            elif i == start + 1:
                out.append(sub[start])
            else:
                lead = first
                assert lead is not None  # a run of two or more began with it
                for j in range(start, i):
                    sub[j] = self.remove_leading_regexp(sub[j], j != start)
                    self.check_limits(sub[j])
                suffix = yield self.collapse(sub[start:i], ALTERNATE)
                re = self.new_regexp(CONCAT)
                re.sub = [lead, suffix]
                out.append(re)
            start = i
            first = ifirst
        sub = out

        # Round 3: runs of single runes and classes into one class.
        out = []
        start = 0
        for i in range(len(sub) + 1):
            if i < len(sub) and _is_char_class(sub[i]):
                continue
            if i == start:
                pass
            elif i == start + 1:
                out.append(sub[start])
            else:
                most = start
                for j in range(start + 1, i):
                    if sub[most].op < sub[j].op or (
                        sub[most].op == sub[j].op and len(sub[most].rune) < len(sub[j].rune)
                    ):
                        most = j
                sub[start], sub[most] = sub[most], sub[start]
                for j in range(start + 1, i):
                    _merge_char_class(sub[start], sub[j])
                    self.reuse(sub[j])
                _clean_alt(sub[start])
                out.append(sub[start])
            if i < len(sub):
                out.append(sub[i])
            start = i + 1
        sub = out

        # Round 4: runs of empty matches into one.
        return [
            s
            for i, s in enumerate(sub)
            if not (i + 1 < len(sub) and s.op == EMPTY_MATCH and sub[i + 1].op == EMPTY_MATCH)
        ]

    def remove_leading_string(self, re: _Re, n: int) -> _Re:
        if re.op == CONCAT and re.sub:
            sub = self.remove_leading_string(re.sub[0], n)
            re.sub[0] = sub
            if sub.op == EMPTY_MATCH:
                self.reuse(sub)
                if len(re.sub) <= 1:
                    re.op = EMPTY_MATCH
                    re.sub = []
                elif len(re.sub) == 2:
                    old = re
                    re = re.sub[1]
                    self.reuse(old)
                else:
                    del re.sub[0]
            return re
        if re.op == LITERAL:
            re.rune = re.rune[n:]
            if not re.rune:
                re.op = EMPTY_MATCH
        return re

    def remove_leading_regexp(self, re: _Re, reuse: bool) -> _Re:
        if re.op == CONCAT and re.sub:
            if reuse:
                self.reuse(re.sub[0])
            del re.sub[0]
            if not re.sub:
                re.op = EMPTY_MATCH
                re.sub = []
            elif len(re.sub) == 1:
                old = re
                re = re.sub[0]
                self.reuse(old)
            return re
        if reuse:
            self.reuse(re)
        return self.new_regexp(EMPTY_MATCH)

    # -- the pieces of the syntax -------------------------------------------------------------
    def parse_perl_flags(self, i: int) -> int:
        """``parsePerlFlags`` at ``i`` (``(?``): ``(?P<name>``, ``(?<name>``, or flags
        and ``(?:``; returns where the parse goes on."""
        s, n = self.whole, len(self.whole)
        starts_with_p = n - i > 4 and s[i + 2] == "P" and s[i + 3] == "<"
        starts_with_name = n - i > 3 and s[i + 2] == "<"
        if starts_with_p or starts_with_name:
            expr_start = i + (3 if starts_with_name else 4)
            end = s.find(">", i)
            if end < 0:
                raise _Error(ERR_INVALID_NAMED_CAPTURE, s[i:])
            capture, name = s[i : end + 1], s[expr_start:end]
            if not name or not all(c == "_" or _isalnum(c) for c in name):
                raise _Error(ERR_INVALID_NAMED_CAPTURE, capture)
            self.num_cap += 1
            re = self.op(LEFT_PAREN)
            re.cap = self.num_cap
            re.name = name
            return end + 1
        j = i + 2
        flags = self.flags
        sign = +1
        saw_flag = False
        while j < n:
            c = s[j]
            j += 1
            if c == "i":
                flags |= FOLD_CASE
                saw_flag = True
            elif c == "m":
                flags &= ~ONE_LINE & _FLAGS16
                saw_flag = True
            elif c == "s":
                flags |= DOT_NL
                saw_flag = True
            elif c == "U":
                flags |= NON_GREEDY
                saw_flag = True
            elif c == "-":
                if sign < 0:
                    break
                sign = -1
                flags = ~flags & _FLAGS16  # so that | turns into &^, and back below
                saw_flag = False
            elif c in ":)":
                if sign < 0:
                    if not saw_flag:
                        break
                    flags = ~flags & _FLAGS16
                if c == ":":
                    self.op(LEFT_PAREN)
                self.flags = flags
                return j
            else:
                break
        raise _Error(ERR_INVALID_PERL_OP, s[i:j])

    def parse_vertical_bar(self) -> None:
        self.concat()
        if not self.swap_vertical_bar():
            self.op(VERTICAL_BAR)

    def swap_vertical_bar(self) -> bool:
        stack = self.stack
        n = len(stack)
        if (
            n >= 3
            and stack[n - 2].op == VERTICAL_BAR
            and _is_char_class(stack[n - 1])
            and _is_char_class(stack[n - 3])
        ):
            re1, re3 = stack[n - 1], stack[n - 3]
            if re1.op > re3.op:
                re1, re3 = re3, re1
                stack[n - 3] = re3
            _merge_char_class(re3, re1)
            self.reuse(re1)
            stack.pop()
            return True
        if n >= 2:
            re1, re2 = stack[n - 1], stack[n - 2]
            if re2.op == VERTICAL_BAR:
                if n >= 3:
                    _clean_alt(stack[n - 3])
                stack[n - 2], stack[n - 1] = re1, re2
                return True
        return False

    def parse_right_paren(self) -> None:
        self.concat()
        if self.swap_vertical_bar():
            self.stack.pop()
        self.alternate()
        if len(self.stack) < 2:
            raise _Error(ERR_UNEXPECTED_PAREN, self.whole)
        re1, re2 = self.stack[-1], self.stack[-2]
        del self.stack[-2:]
        if re2.op != LEFT_PAREN:
            raise _Error(ERR_UNEXPECTED_PAREN, self.whole)
        self.flags = re2.flags
        if re2.cap == 0:
            self.push(re1)
        else:
            re2.op = CAPTURE
            re2.sub = [re1]
            self.push(re2)

    def parse_class(self, i: int) -> int:
        """``parseClass`` at ``i`` (``[``): the class, pushed; returns where the parse
        goes on."""
        s, n = self.whole, len(self.whole)
        j = i + 1
        re = self.new_regexp(CHAR_CLASS)
        re.flags = self.flags
        sign = +1
        if s[j : j + 1] == "^":
            sign = -1
            j += 1
            if not self.flags & CLASS_NL:
                re.rune += (ord("\n"), ord("\n"))
        klass = re.rune
        first = True
        while j >= n or s[j] != "]" or first:
            if (
                s[j : j + 1] == "-"
                and not self.flags & PERL_X
                and not first
                and s[j + 1 : j + 2] != "]"
            ):
                raise _Error(ERR_INVALID_CHAR_RANGE, s[j : j + 2])
            first = False
            if n - j > 2 and s[j] == "[" and s[j + 1] == ":":
                named = self.parse_named_class(j, klass)
                if named is not None:
                    klass, j = named
                    continue
            got = self.parse_unicode_class(j, klass)
            if got is not None:
                klass, j = got
                continue
            perl = self.parse_perl_class_escape(j, klass)
            if perl is not None:
                klass, j = perl
                continue
            rng = j
            lo, j = self.parse_class_char(j, i)
            hi = lo
            if n - j >= 2 and s[j] == "-" and s[j + 1] != "]":
                hi, j = self.parse_class_char(j + 1, i)
                if hi < lo:
                    raise _Error(ERR_INVALID_CHAR_RANGE, s[rng:j])
            if not self.flags & FOLD_CASE:
                klass = _append_range(klass, lo, hi)
            else:
                klass = _append_folded_range(klass, lo, hi)
        klass = _clean_class(klass)
        if sign < 0:
            klass = _negate_class(klass)
        re.rune = klass
        self.push(re)
        return j + 1

    def parse_class_char(self, j: int, class_start: int) -> tuple[int, int]:
        """``parseClassChar``: one rune of a class, escaped or not."""
        s = self.whole
        if j >= len(s):
            raise _Error(ERR_MISSING_BRACKET, s[class_start:])
        if s[j] == "\\":
            return self.parse_escape(j)
        return ord(s[j]), j + 1

    def parse_perl_class_escape(self, j: int, r: list[int]) -> Optional[tuple[list[int], int]]:
        """``parsePerlClassEscape``: ``\\d``, ``\\s``, ``\\w`` and their negations."""
        s = self.whole
        if not self.flags & PERL_X or len(s) - j < 2 or s[j] != "\\":
            return None
        group = _PERL_GROUP.get(s[j : j + 2])
        if group is None:
            return None
        return self.append_group(r, group), j + 2

    def parse_named_class(self, j: int, r: list[int]) -> Optional[tuple[list[int], int]]:
        """``parseNamedClass``: ``[:alpha:]`` and the other POSIX classes."""
        s = self.whole
        if len(s) - j < 2 or s[j] != "[" or s[j + 1] != ":":
            return None
        end = s.find(":]", j + 2)
        if end < 0:
            return None
        group = _POSIX_GROUP.get(s[j : end + 2])
        if group is None:
            raise _Error(ERR_INVALID_CHAR_RANGE, s[j : end + 2])
        return self.append_group(r, group), end + 2

    def append_group(self, r: list[int], group: _Group) -> list[int]:
        sign, klass = group
        if not self.flags & FOLD_CASE:
            if sign < 0:
                return _append_negated_class(r, klass)
            return _append_class(r, klass)
        tmp = _clean_class(_append_folded_class([], klass))
        if sign < 0:
            return _append_negated_class(r, tmp)
        return _append_class(r, tmp)

    def parse_unicode_class(self, j: int, r: list[int]) -> Optional[tuple[list[int], int]]:
        """``parseUnicodeClass``: ``\\pN``, ``\\p{Name}``, ``\\P...``, ``\\p{^Name}``."""
        s, n = self.whole, len(self.whole)
        if not self.flags & UNICODE_GROUPS or n - j < 2 or s[j] != "\\" or s[j + 1] not in "pP":
            return None
        sign = -1 if s[j + 1] == "P" else +1
        # nextRune: at the end it reads U+FFFD and stays at the end.
        c, k = s[j + 2 : j + 3], min(j + 3, n)
        if c != "{":
            seq = s[j:k]
            name = seq[2:]
        else:
            end = s.find("}", j)
            if end < 0:
                raise _Error(ERR_INVALID_CHAR_RANGE, s[j:])
            seq, k = s[j : end + 1], end + 1
            name = s[j + 3 : end]
        if name[:1] == "^":
            sign = -sign
            name = name[1:]
        got = _unicode_class(name, sign, bool(self.flags & FOLD_CASE))
        if got is None:
            raise _Error(ERR_INVALID_CHAR_RANGE, seq)
        if not r:
            return list(got), k
        # Inside [...] (parseClass): the same runes, which parseClass cleans afterwards.
        r += got
        return r, k

    def parse_escape(self, j: int) -> tuple[int, int]:
        """``parseEscape`` at ``j`` (``\\``): one escaped rune, and where it ends."""
        s, n = self.whole, len(self.whole)
        k = j + 1
        if k >= n:
            raise _Error(ERR_TRAILING_BACKSLASH, "")
        c = s[k]
        k += 1
        if (c in "1234567" and k < n and "0" <= s[k] <= "7") or c == "0":
            r = ord(c) - ord("0")
            for _ in range(2):  # up to three octal digits
                if k >= n or not "0" <= s[k] <= "7":
                    break
                r = r * 8 + ord(s[k]) - ord("0")
                k += 1
            return r, k
        if c == "x" and k < n:
            c = s[k]
            k += 1
            if c == "{":
                nhex = r = 0
                while k < n:
                    c = s[k]
                    k += 1
                    if c == "}":
                        if nhex:
                            return r, k
                        break
                    v = _unhex(c)
                    if v < 0:
                        break
                    r = r * 16 + v
                    if r > MAX_RUNE:
                        break
                    nhex += 1
            else:
                x = _unhex(c)
                y = -1  # nextRune at the end reads U+FFFD, no hexadecimal digit
                if k < n:
                    y = _unhex(s[k])
                    k += 1
                if x >= 0 and y >= 0:
                    return x * 16 + y, k
        elif c in _C_ESCAPES:
            return _C_ESCAPES[c], k
        elif ord(c) < 0x80 and not _isalnum(c):  # an escaped punctuation mark is itself
            return ord(c), k
        raise _Error(ERR_INVALID_ESCAPE, s[j:k])


_C_ESCAPES = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}


def _isalnum(c: str) -> bool:
    return "0" <= c <= "9" or "A" <= c <= "Z" or "a" <= c <= "z"


def _unhex(c: str) -> int:
    if "0" <= c <= "9":
        return ord(c) - ord("0")
    if "a" <= c <= "f":
        return ord(c) - ord("a") + 10
    if "A" <= c <= "F":
        return ord(c) - ord("A") + 10
    return -1


def _min_fold_rune(r: int) -> int:
    if r < _MIN_FOLD or r > _MAX_FOLD:
        return r
    m = r0 = r
    r = simple_fold(r)
    while r != r0:
        m = min(m, r)
        r = simple_fold(r)
    return m


def _leading_string(re: _Re) -> tuple[list[int], int]:
    if re.op == CONCAT and re.sub:
        re = re.sub[0]
    if re.op != LITERAL:
        return [], 0
    return re.rune, re.flags & FOLD_CASE


def _leading_regexp(re: _Re) -> Optional[_Re]:
    if re.op == EMPTY_MATCH:
        return None
    if re.op == CONCAT and re.sub:
        sub = re.sub[0]
        return None if sub.op == EMPTY_MATCH else sub
    return re


def _parse_repeat(s: str, i: int) -> Optional[tuple[int, int, int]]:
    """``parseRepeat`` at ``i`` (``{``): ``{n}``, ``{n,}`` (max -1) or ``{n,m}`` and
    where it ends; None when it is not of that form (then ``{`` is a literal); a number
    too big reads as -1."""
    n = len(s)
    got = _parse_int(s, i + 1)
    if got is None:
        return None
    lo, k = got
    if k >= n:
        return None
    if s[k] != ",":
        hi = lo
    else:
        k += 1
        if k >= n:
            return None
        if s[k] == "}":
            hi = -1
        else:
            got = _parse_int(s, k)
            if got is None:
                return None
            hi, k = got
            if hi < 0:
                lo = -1
    if k >= n or s[k] != "}":
        return None
    return lo, hi, k + 1


def _parse_int(s: str, i: int) -> Optional[tuple[int, int]]:
    """``parseInt``: decimal digits without a leading zero; -1 from 1e8 on."""
    n = len(s)
    if i >= n or not "0" <= s[i] <= "9":
        return None
    if n - i >= 2 and s[i] == "0" and "0" <= s[i + 1] <= "9":
        return None
    k = i
    while k < n and "0" <= s[k] <= "9":
        k += 1
    value = 0
    for digit in s[i : min(k, i + 10)]:
        if value >= 100_000_000:
            value = -1
            break
        value = value * 10 + ord(digit) - ord("0")
    return value, k


def parse_error(pattern: str, flags: int = PERL) -> Optional[GoSyntaxError]:
    """Why Go's ``syntax.Parse(pattern, flags)`` refuses ``pattern`` (``regexp.Compile``
    parses with :data:`PERL`), or None where it parses it."""
    try:
        _parse(pattern, flags)
    except _Error as exc:
        return exc.error
    except _Limit as exc:  # Go's recover in parse: the whole pattern is named
        return GoSyntaxError(exc.code, pattern)
    return None


def _parse(s: str, flags: int) -> None:
    """Go's ``parse`` with ``flags``, the pattern read by position (Go's slices of it)."""
    p = _Parser(flags, s)
    n = len(s)
    i = 0
    last_repeat = -1
    while i < n:
        repeat = -1
        c = s[i]
        if c == "(":
            if p.flags & PERL_X and s[i + 1 : i + 2] == "?":
                i = p.parse_perl_flags(i)
            else:
                p.num_cap += 1
                p.op(LEFT_PAREN).cap = p.num_cap
                i += 1
        elif c == "|":
            p.parse_vertical_bar()
            i += 1
        elif c == ")":
            p.parse_right_paren()
            i += 1
        elif c == "^":
            p.op(BEGIN_TEXT if p.flags & ONE_LINE else BEGIN_LINE)
            i += 1
        elif c == "$":
            if p.flags & ONE_LINE:
                p.op(END_TEXT).flags |= WAS_DOLLAR
            else:
                p.op(END_LINE)
            i += 1
        elif c == ".":
            p.op(ANY_CHAR if p.flags & DOT_NL else ANY_CHAR_NOT_NL)
            i += 1
        elif c == "[":
            i = p.parse_class(i)
        elif c in "*+?":
            op = {"*": STAR, "+": PLUS, "?": QUEST}[c]
            repeat = i
            i = p.repeat(op, 0, 0, i, i + 1, last_repeat)
        elif c == "{":
            got = _parse_repeat(s, i)
            if got is None:
                p.literal(ord("{"))
                i += 1
            else:
                lo, hi, after = got
                if lo < 0 or lo > _REPEAT_LIMIT or hi > _REPEAT_LIMIT or (hi >= 0 and lo > hi):
                    raise _Error(ERR_INVALID_REPEAT_SIZE, s[i:after])
                repeat = i
                i = p.repeat(REPEAT, lo, hi, i, after, last_repeat)
        elif c == "\\":
            i = _parse_backslash(p, i)
        else:
            p.literal(ord(c))
            i += 1
        last_repeat = repeat
    p.concat()
    if p.swap_vertical_bar():
        p.stack.pop()
    p.alternate()
    if len(p.stack) != 1:
        raise _Error(ERR_MISSING_PAREN, s)


def _parse_backslash(p: _Parser, i: int) -> int:
    """``\\`` in the main loop: an assertion, ``\\Q...\\E``, a class, or one rune."""
    s, n = p.whole, len(p.whole)
    if p.flags & PERL_X and n - i >= 2:
        c = s[i + 1]
        if c in _ASSERTIONS:
            p.op(_ASSERTIONS[c])
            return i + 2
        if c == "C":  # any byte: not supported
            raise _Error(ERR_INVALID_ESCAPE, s[i : i + 2])
        if c == "Q":
            end = s.find("\\E", i + 2)
            for ch in s[i + 2 : n if end < 0 else end]:
                p.literal(ord(ch))
            return n if end < 0 else end + 2
    re = p.new_regexp(CHAR_CLASS)
    re.flags = p.flags
    if n - i >= 2 and s[i + 1] in "pP":
        got = p.parse_unicode_class(i, [])
        if got is not None:
            re.rune, i = got
            p.push(re)
            return i
    perl = p.parse_perl_class_escape(i, [])
    if perl is not None:
        re.rune, i = perl
        p.push(re)
        return i
    p.reuse(re)
    r, i = p.parse_escape(i)
    p.literal(r)
    return i


_ASSERTIONS = {"A": BEGIN_TEXT, "b": WORD_BOUNDARY, "B": NO_WORD_BOUNDARY, "z": END_TEXT}
