"""The serving engine: core (sequences, KV blocks, step loop), policies, performance model."""
