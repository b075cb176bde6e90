"""Engine core: sequences, batches, paged KV blocks and the step loop. Pure Python, no clock."""
from engines.core.batch import Batch
from engines.core.block_manager import DEFAULT_BLOCK_SIZE, BlockManager, blocks_for
from engines.core.engine import Engine, Policy, StepOutput
from engines.core.sequence import Sequence, SequenceStatus

__all__ = [
    "Batch",
    "BlockManager",
    "DEFAULT_BLOCK_SIZE",
    "Engine",
    "Policy",
    "Sequence",
    "SequenceStatus",
    "StepOutput",
    "blocks_for",
]
