"""Engine core: sequences, batches, paged KV blocks and the step loop. Pure Python, no clock."""
from engines.core.batch import Batch
from engines.core.block_manager import DEFAULT_BLOCK_SIZE, BlockManager, blocks_for
from engines.core.caching_engine import PrefixCachingEngine
from engines.core.checks import PolicyBroken
from engines.core.config import ROLES, EngineConfig
from engines.core.engine import Engine, StepOutput
from engines.core.kv_tier import HostTier, TierStats
from engines.core.policy import BasePolicy, Policy
from engines.core.prefix_cache import PrefixCacheStats, PrefixCachingBlockManager
from engines.core.sequence import Sequence, SequenceStatus
from engines.core.tokens import Segments, TokenIds

__all__ = [
    "BasePolicy",
    "Batch",
    "BlockManager",
    "DEFAULT_BLOCK_SIZE",
    "Engine",
    "EngineConfig",
    "HostTier",
    "Policy",
    "PolicyBroken",
    "PrefixCacheStats",
    "PrefixCachingBlockManager",
    "PrefixCachingEngine",
    "ROLES",
    "Segments",
    "Sequence",
    "SequenceStatus",
    "StepOutput",
    "TierStats",
    "TokenIds",
    "blocks_for",
]
