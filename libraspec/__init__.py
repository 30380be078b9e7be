"""LibraSpec Explorer: dynamic speculative length for block-diffusion drafters."""
