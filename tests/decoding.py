"""What the engine and tree tests share: decode to a list of records, the tokens they commit,
and a pair with another drafter."""

from __future__ import annotations

import dataclasses

from libraspec.engine import DecodeConfig


def generated(records):
    return [t for r in records for t in r.committed_tokens]


def run(decoder, prompt, mode, policy, **cfg):
    return list(decoder.run(prompt, mode, policy, DecodeConfig(**cfg)))


def with_drafter(pair, drafter, stop_ids=frozenset()):
    return dataclasses.replace(pair, drafter=drafter, stop_ids=stop_ids)
