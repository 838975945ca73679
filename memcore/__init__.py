"""memcore: long-term semantic memory for AI agents and robots."""

from memcore.errors import *  # noqa: F401,F403
from memcore.types import (  # noqa: F401
    Clock,
    DecayWeights,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    MemoryTier,
    PromotionPolicy,
    StoredMemory,
)

__version__ = "0.1.0"
