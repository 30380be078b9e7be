"""What the engine and tree tests share: decode to a list of records, the tokens they commit,
a pair with another drafter, and the check that caches equal a rebuild after every round."""

from __future__ import annotations

import dataclasses

import torch

from libraspec.engine import DecodeConfig
from libraspec.records import committed_text


def generated(records):
    return committed_text(records)


def run(decoder, prompt, mode, policy, **cfg):
    return list(decoder.run(prompt, mode, policy, DecodeConfig(**cfg)))


def with_drafter(pair, drafter, stop_ids=frozenset()):
    return dataclasses.replace(pair, drafter=drafter, stop_ids=stop_ids)


def check_caches(decoder, rebuild: bool = True, tolerance: float = 1e-6) -> list[int]:
    """Install a check that runs after every rollback (`SpeculativeDecoder.after_fit`): both caches
    hold len(ids) - 1 entries and, with `rebuild`, the target cache equals a fresh prefill of those
    tokens and a block drafter's context (the hybrid's included) or the EAGLE-style head's equals one
    rebuilt from their features straight through the module, not the engine's code path. Returns the list of the
    sequence lengths it checked, which grows as the decoder runs."""
    checked = []
    target, drafter = decoder.target, decoder.drafter
    close = dict(rtol=tolerance, atol=tolerance)

    def check(ids, target_cache, context) -> None:
        assert target_cache.get_seq_length() == len(ids) - 1
        assert drafter.context_length(context) == len(ids) - 1
        if rebuild:
            fresh = target.new_cache()
            out = target.forward(fresh, ids[:-1])
            for have, want in zip(target_cache.layers, fresh.layers):
                torch.testing.assert_close(have.keys, want.keys, **close)
                torch.testing.assert_close(have.values, want.values, **close)
            block = getattr(drafter, "block", drafter)  # the hybrid's block-diffusion half
            module = getattr(block, "module", None)
            own = context[0] if block is not drafter else context
            if module is not None and hasattr(own, "keys"):
                rebuilt = module.new_cache()
                positions = torch.arange(len(ids) - 1).view(1, -1)
                module.extend_context(rebuilt, module.target_features(out.hidden_states), positions)
                for have, want in zip(own.keys + own.values, rebuilt.keys + rebuilt.values):
                    torch.testing.assert_close(have, want, **close)
            head = getattr(drafter, "head", None)  # the EAGLE-style drafter's head
            if head is not None:
                rebuilt = head.new_cache()
                features = head.target_features(out.hidden_states)
                head.extend_context(rebuilt, torch.tensor([ids[:-1]]), features, 0)
                for have, want in zip(
                    context.keys + context.values + [context.features],
                    rebuilt.keys + rebuilt.values + [rebuilt.features],
                ):
                    torch.testing.assert_close(have, want, **close)
        checked.append(len(ids))

    decoder.after_fit = check
    return checked
