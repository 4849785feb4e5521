#!/usr/bin/env python3
"""Seed inputs that run the forked children: `python3 fuzz/seeds.py TARGET DIR`
writes them into DIR for TARGET (ops or concurrent).

A child's coverage never reaches libFuzzer, and a target runs children only
in the inputs whose first byte picks them (one in 4 forks, one in 16 the
misuse and out-of-memory children: tests/ops_model/mod.rs, `run`), so the
corpora keep inputs that ran one only by chance. These seeds run each child
on purpose: a fork from one, two and four threads, every misuse kind (debug
mode's two included), an out-of-memory child; and for `concurrent`, forks
while three threads churn what takes a lock (`fork-while-*`), for the
repairs a child makes when a thread it lost held one, which such a fork
meets only by chance. ci/fuzz.sh passes the seeds to every run after its
corpus; its coverage replay replays them, the `fork-while-*` ten times.

The bytes are the model's operations as `decode` reads them
(tests/ops_model/mod.rs); a change there is a change here."""

import os
import struct
import sys

# The first byte: 1 + b % 4 threads; children when (b / 4) % 16 == 0.
def first_byte(threads):
    return threads - 1

def u16(v):
    return struct.pack("<H", v)

# Sizes as `Bytes::size` reads them: a range byte, then a u16.
def small(n):  # 1..=128 bytes
    return bytes([0]) + u16(n - 1)

def class_size(n):  # 1..=1024 bytes
    return bytes([110]) + u16(n - 1)

def medium(n):  # just above the small classes: n bytes more
    return bytes([225]) + u16(n)

def large(k):  # 1 + k * 512 bytes, up to 32 MiB
    return bytes([255]) + u16(k)

def alloc(slot, size, align_byte=0):
    return bytes([0]) + u16(slot) + size + bytes([align_byte])

def alloc_many(slot, count_quarter, size):
    return bytes([196]) + u16(slot) + bytes([count_quarter]) + size + bytes([0])

def free_many(slot, count_eighth, stride):
    return bytes([204]) + u16(slot) + bytes([count_eighth, stride])

def send(slot, to):
    return bytes([178]) + u16(slot) + bytes([to])

def free(slot):
    return bytes([120]) + u16(slot)

def fork(seed):
    return bytes([246, seed])

def misuse(kind, size):
    return bytes([250, kind]) + size

def oom(size):
    return bytes([253]) + size

CHECK = bytes([226])
YIELD = bytes([230])
EXIT = bytes([220])
TRIM = bytes([214])

# A thread's blocks of every kind: small, in a class, medium, large, many.
def blocks(base):
    return (alloc(base, small(24)) + alloc(base + 1, class_size(700))
            + alloc(base + 2, medium(5000)) + alloc(base + 3, large(600))
            + alloc_many(base + 8, 40, small(48)))

def seed(slices):
    """An input of one slice per thread, padded with yields to one length."""
    n = max(len(s) for s in slices)
    return bytes([first_byte(len(slices))]) + b"".join(s + YIELD * (n - len(s)) for s in slices)

def seeds(target):
    # `concurrent` runs two threads at least.
    one = [] if target == "concurrent" else [1]
    out = {}
    for threads in one + [2, 4]:
        # Thread 0 forks after the others have made, sent and freed blocks
        # (in `concurrent` while they are at it).
        others = [blocks(100 * t) + send(100 * t, 0) + free_many(100 * t + 8, 4, 3)
                  + alloc_many(100 * t + 60, 60, class_size(200)) + free_many(100 * t + 60, 20, 1)
                  for t in range(1, threads)]
        out[f"fork-{threads}-threads"] = seed(
            [blocks(0) + YIELD + fork(1) + CHECK] + others)
    if target == "concurrent":
        # A fork while three threads churn what takes a lock (the segments'
        # for medium blocks and trims, the large blocks' table, the node
        # lists, the registry at thread exits; in debug mode the orphan
        # heap's), after two or six of the same operations: the child finds
        # a lock held, by chance, and repairs what it guards.
        for name, churn in [
                ("medium", lambda t, i: alloc(t + i % 2, medium(3000 * i))),
                ("large", lambda t, i: alloc(t + i % 2, large(300 + 50 * i))),
                ("small", lambda t, i: alloc_many(t + 200 * (i % 2), 60, class_size(64 + 32 * i))
                 + free_many(t + 200 * (i % 2), 30, 1)),
                ("exit", lambda t, i: alloc(t, class_size(100 * i + 1)) + EXIT),
                ("trim", lambda t, i: alloc(t + i % 3, [medium(3000 * i), large(300 + 50 * i),
                                                         class_size(64 * i + 1)][i % 3]) + TRIM * 2)]:
            busy = [b"".join(churn(100 * t, i) for i in range(12))[:250] for t in range(1, 4)]
            for ops in [2, 6]:
                out[f"fork-while-{name}-{ops}"] = seed(
                    [b"".join(churn(0, i) for i in range(ops)) + fork(2)] + busy)
    threads = one[0] if one else 2
    for kind in range(15):
        out[f"misuse-{kind}"] = seed(
            [blocks(0) + free(1) + misuse(kind, small(40 + kind))]
            + [blocks(100)] * (threads - 1))
    out["oom"] = seed([blocks(0) + oom(class_size(100))] + [blocks(100)] * (threads - 1))
    return out

def main():
    target, dir = sys.argv[1], sys.argv[2]
    os.makedirs(dir, exist_ok=True)
    for name, data in seeds(target).items():
        with open(os.path.join(dir, name), "wb") as f:
            f.write(data)

if __name__ == "__main__":
    main()
