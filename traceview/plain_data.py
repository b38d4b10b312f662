"""What a JSON-able document holds, found in a few passes over batches of its containers, in C
(no Python code per value; memory bounded by a batch): whether it is plain data (dicts, lists,
tuples, str, int, float, bool, None, each of exactly that type), whether it holds tuples, and
whether its floats are finite and inside [1e-4, 1e16) (where Python's float repr writes no
exponent).

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
LOW, HIGH = 1e-4, 1e16          # floats written without an exponent by repr: 0 and [1e-4, 1e16)


@dataclass(frozen=True)
class Shape:
    plain: bool                 # only the types above (dict keys are not looked at)
    tuples: bool = False        # some sequence is a tuple (msgpack and JSON give lists back)
    finite: bool = True         # no NaN or infinity
    exponent_floats: bool = False   # some finite float != 0 outside [1e-4, 1e16)


BATCH = 4096                    # containers looked at together: memory bounded by a batch's values


def scan(doc) -> Shape:
    """The shape of `doc`. Dict keys are not looked at: msgspec refuses a JSON key that is not a
    str (with sorted keys), and msgpack gives back the keys it can write."""
    if type(doc) not in PLAIN:
        return Shape(plain=False)
    pending = [[doc] if type(doc) in CONTAINERS else [[doc]]]
    tuples = False
    finite = True
    exponent = False
    while pending:
        level = pending.pop()
        batch, rest = level[:BATCH], level[BATCH:]
        if rest:
            pending.append(rest)
        dicts = [c for c in batch if type(c) is dict]
        seqs = [c for c in batch if type(c) is not dict] if len(dicts) != len(batch) else []
        if seqs and not tuples:
            tuples = any(type(c) is tuple for c in seqs)
        values = list(chain(chain.from_iterable(map(dict.values, dicts)), chain.from_iterable(seqs)))
        types = list(map(type, values))
        present = set(types)
        if not present <= PLAIN:
            return Shape(plain=False)
        if float in present and finite:
            floats = list(compress(values, map(operator.is_, types, repeat(float))))
            if not all(map(math.isfinite, floats)):
                finite = False
            elif not exponent:
                sizes = list(map(abs, floats))
                exponent = sum(map(operator.lt, sizes, repeat(LOW))) != sizes.count(0.0) or max(sizes) >= HIGH
        kinds = present & CONTAINERS
        if not kinds:
            continue
        if len(kinds) == 1:
            (kind,) = kinds
            pending.append(list(compress(values, map(operator.is_, types, repeat(kind)))))
        else:
            pending.append(list(compress(values, map(CONTAINERS.__contains__, types))))
    return Shape(plain=True, tuples=tuples, finite=finite, exponent_floats=exponent)
