"""What a JSON-able document holds, found in a few passes over batches of its containers, in C
(no Python code per value; memory bounded by a batch): whether it is plain data (dicts, lists,
tuples, str, int, float, bool, None, each of exactly that type), whether it holds tuples, and
whether its floats are finite and inside [1e-4, 1e16) (where Python's float repr writes no
exponent), whether its ints fit 64 bits and its dict keys are all str. A registered packed sequence
of rows (document/packed.py) counts as the plain rows it holds, by the shape it carries.

The JSON writer uses it to know when msgspec writes the bytes json.dumps writes; the store, to know
when msgpack gives a document back exactly. Imports nothing of traceview.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from itertools import chain, compress, repeat

SCALARS = frozenset({str, int, float, bool, type(None)})
CONTAINERS = frozenset({dict, list, tuple})
PLAIN = SCALARS | CONTAINERS
INT_LOW, INT_HIGH = -2**63, 2**64  # the ints msgspec writes (JSON and msgpack)
LOW, HIGH = 1e-4, 1e16          # floats written without an exponent by repr: 0 and [1e-4, 1e16)


@dataclass(frozen=True)
class Shape:
    plain: bool                 # only the types above (dict keys are not looked at)
    tuples: bool = False        # some sequence is a tuple (msgpack and JSON give lists back)
    finite: bool = True         # no NaN or infinity
    exponent_floats: bool = False   # some finite float != 0 outside [1e-4, 1e16)
    wide_ints: bool = False     # some int outside [-2**63, 2**64) (msgspec writes none of them)
    str_keys: bool = True       # every dict key is a str (msgspec writes no other JSON key)


PACKED: set = set()            # sequence types holding plain rows that know their own Shape (`shape`)


def register_packed(cls: type) -> None:
    """Let scan take an instance of `cls` (a sequence of plain rows with a `shape` attribute, the
    scan of its rows) as plain data of that shape, without looking inside."""
    PACKED.add(cls)


BATCH = 4096                    # containers looked at together: memory bounded by a batch's values


def scan(doc, ints: bool = True) -> Shape:
    """The shape of `doc` (dict keys are only looked at for their type: msgpack gives back the keys
    it can write). `ints=False`: its ints are not looked at (wide_ints is False): for rows about to
    be encoded by msgspec, which raises OverflowError for an int it cannot write (a fifth of a row
    list's scan)."""
    if type(doc) in PACKED:
        return doc.shape
    if type(doc) not in PLAIN:
        return Shape(plain=False)
    pending = [[doc] if type(doc) in CONTAINERS else [[doc]]]
    tuples = False
    finite = True
    exponent = False
    wide = False
    str_keys = True
    while pending:
        level = pending.pop()
        batch, rest = level[:BATCH], level[BATCH:]
        if rest:
            pending.append(rest)
        dicts = [c for c in batch if type(c) is dict]
        seqs = [c for c in batch if type(c) is not dict] if len(dicts) != len(batch) else []
        if str_keys and dicts:
            str_keys = set(map(type, chain.from_iterable(map(dict.keys, dicts)))) <= {str}
        if seqs and not tuples:
            tuples = any(type(c) is tuple for c in seqs)
        values = list(chain(chain.from_iterable(map(dict.values, dicts)), chain.from_iterable(seqs)))
        types = list(map(type, values))
        present = set(types)
        if not present <= PLAIN:
            if not present - PLAIN <= PACKED:
                return Shape(plain=False)
            for v in values:
                if type(v) in PACKED:
                    s = v.shape
                    if not s.plain:
                        return Shape(plain=False)
                    tuples, finite = tuples or s.tuples, finite and s.finite
                    exponent = exponent or s.exponent_floats
                    wide = wide or s.wide_ints
                    str_keys = str_keys and s.str_keys
            keep = list(map(PLAIN.__contains__, types))
            values, types = list(compress(values, keep)), list(compress(types, keep))
            present &= PLAIN
        if float in present and finite:
            floats = list(compress(values, map(operator.is_, types, repeat(float))))
            if not all(map(math.isfinite, floats)):
                finite = False
            elif not exponent:
                sizes = list(map(abs, floats))
                exponent = sum(map(operator.lt, sizes, repeat(LOW))) != sizes.count(0.0) or max(sizes) >= HIGH
        if ints and int in present and not wide:
            ivals = list(compress(values, map(operator.is_, types, repeat(int))))
            wide = max(ivals) >= INT_HIGH or min(ivals) < INT_LOW
        kinds = present & CONTAINERS
        if not kinds:
            continue
        if len(kinds) == 1:
            (kind,) = kinds
            pending.append(list(compress(values, map(operator.is_, types, repeat(kind)))))
        else:
            pending.append(list(compress(values, map(CONTAINERS.__contains__, types))))
    return Shape(plain=True, tuples=tuples, finite=finite, exponent_floats=exponent, wide_ints=wide,
                 str_keys=str_keys)
