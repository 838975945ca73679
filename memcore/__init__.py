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
from memcore.recall.weights import HybridWeights  # noqa: F401
from memcore.recall.approx import ApproximateSearch  # noqa: F401
from memcore.embedders import HashingEmbedder, LexicalScorer, MiniLMEmbedder  # noqa: F401
from memcore.stores.short import ShortTermMemory  # noqa: F401
from memcore.stores.long import LongTermMemory  # noqa: F401
from memcore.tiered import TwoTierMemory  # noqa: F401
from memcore.agent import SemanticMemory  # noqa: F401

from memcore import errors as _errors

__version__ = "0.1.0"

__all__ = [
    "SemanticMemory", "LongTermMemory", "ShortTermMemory", "TwoTierMemory", "PostgresMemory",
    "MiniLMEmbedder", "HashingEmbedder", "LexicalScorer",
    "DecayWeights", "HybridWeights", "ApproximateSearch", "PromotionPolicy",
    "MemoryItem", "StoredMemory", "MemoryQuery", "MemoryHit", "MemoryTier", "Clock",
    *_errors.__all__,
]


def __getattr__(name: str):
    # PostgresMemory on first use (PEP 562): its module is cheap, but keeping it out of
    # `import memcore` keeps the import path of embedded users unchanged; psycopg itself
    # loads only when a PostgresMemory connects (and names the extra when it is missing).
    if name == "PostgresMemory":
        from memcore.stores.postgres import PostgresMemory

        return PostgresMemory
    raise AttributeError(f"module 'memcore' has no attribute {name!r}")
