#!/usr/bin/env python3
"""Deterministic generated text (issue 25's comparison payload): sentences of
4-15 pseudo-words from a 512-word vocabulary, drawn with xorshift64*. The
relay's comparison test (agents/relay/tests/vs_zstd.rs) generates the same
bytes. Usage: gentext.py BYTES > file"""
import sys

M = (1 << 64) - 1
SYLL = ["ka", "to", "ri", "mon", "el", "sa", "tur", "ven",
        "di", "lo", "pra", "ne", "qu", "ist", "or", "ba"]
WORDS = ["".join(SYLL[(i >> (4 * k)) & 15] for k in range(1 + i % 3)) for i in range(512)]


def main():
    n = int(sys.argv[1])
    x = 0x9E3779B97F4A7C15
    out, size = [], 0

    def nxt():
        nonlocal x
        x ^= x >> 12
        x ^= (x << 25) & M
        x ^= x >> 27
        return (x * 0x2545F4914F6CDD1D) & M

    while size < n:
        words = [WORDS[nxt() % 512] for _ in range(4 + nxt() % 12)]
        s = " ".join(words) + (".\n" if nxt() % 4 == 0 else ". ")
        out.append(s)
        size += len(s)
    sys.stdout.buffer.write("".join(out).encode()[:n])


main()
