"""Redis Cluster hash slots: the slot of a key name, and a hash tag that lands in any given slot.

A cluster runs a script only when all its keys share a slot. keepstate's keys of one scope carry the
scope's hash tag ``{ns}``, so one scope is one slot; what a whole slot shares (the set of its keys
with an expiry, so ``sweep`` finds them) is named with ``slot_tag(slot)``, a tag that hashes to that
slot exactly — found by algebra, not by search: CRC16 (what Redis hashes) is linear over GF(2), so on
four characters ``@``…``O`` (16 free bits) the slot is an affine function of those bits, and solving
it once (a 14-row elimination) gives every slot's tag in a few XORs.
"""

from __future__ import annotations

from binascii import crc_hqx
from functools import cache

from redis.crc import key_slot

SLOTS = 16384
_BITS = 14  # SLOTS == 2 ** _BITS: a slot is the low 14 bits of the CRC
_CHARS = 4


def slot_of(name: str) -> int:
    """The slot of a key name, by Redis's rule (its hash tag's CRC16, else the whole name's)."""
    return int(key_slot(name.encode()))


def _tag(bits: int) -> bytes:
    return bytes(0x40 | (bits >> (4 * i)) & 15 for i in range(_CHARS))


@cache
def _solver() -> tuple[int, dict[int, tuple[int, int]]]:
    """The slot of tag 0, and for each pivot bit of the slot a (slot bits, tag bits) pair that sets it."""
    origin = crc_hqx(_tag(0), 0) % SLOTS
    pivots: dict[int, tuple[int, int]] = {}
    for bit in range(4 * _CHARS):
        slot, bits = (crc_hqx(_tag(1 << bit), 0) % SLOTS) ^ origin, 1 << bit
        for pivot in reversed(range(_BITS)):
            if slot >> pivot & 1:
                if pivot not in pivots:
                    pivots[pivot] = (slot, bits)
                    break
                slot, bits = slot ^ pivots[pivot][0], bits ^ pivots[pivot][1]
    return origin, pivots


@cache
def slot_tag(slot: int) -> str:
    """Four characters whose CRC16 puts a key tagged ``{them}`` in ``slot``."""
    origin, pivots = _solver()
    want, bits = slot ^ origin, 0
    for pivot in reversed(range(_BITS)):
        if want >> pivot & 1:
            want, bits = want ^ pivots[pivot][0], bits ^ pivots[pivot][1]
    return _tag(bits).decode()
