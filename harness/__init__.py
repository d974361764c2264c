"""hybrid-harness: replay vLLM's hybrid (attention + Mamba) allocator against exact oracles."""

__version__ = "0.1.0"
