"""Building blocks of the decoder models, one noun per module; linear layers and embeddings are
tensor-parallel shards that know how to cut their slice out of a full checkpoint tensor."""
