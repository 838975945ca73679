"""A LangGraph agent whose long-term memory is memcore: ``python examples/langgraph_agent.py``.

The graph is compiled with ``store=MemcoreStore(LongTermMemory(path, embedder))``; one node
stores what the user asks it to remember, the next searches the user's memories for the
message (ranked by memcore) and answers with the best one. Needs ``pip install
'memcore-agent[langgraph]'``. HashingEmbedder needs no model; use ``MiniLMEmbedder()`` for semantic
recall.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from typing import TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph

from memcore import HashingEmbedder, LongTermMemory
from memcore.integrations.langgraph import MemcoreStore


class State(TypedDict, total=False):
    user: str
    message: str
    answer: str


def remember(state: State) -> State:
    """Store "remember ..." messages as memories of the user (namespace: user, memories)."""
    text = state["message"]
    if text.lower().startswith("remember "):
        get_store().put(("users", state["user"], "memories"), str(uuid.uuid4()),
                        {"text": text[len("remember "):], "kind": "fact"})
    return {}


def recall(state: State) -> State:
    """Answer with the user's memory that best matches the message."""
    hits = get_store().search(("users", state["user"]), query=state["message"], limit=1,
                              filter={"kind": "fact"})
    return {"answer": f"I remember: {hits[0].value['text']}" if hits else "I don't know yet."}


def build(store: MemcoreStore):
    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile(store=store)


def main(path: str) -> str:
    with LongTermMemory(path, HashingEmbedder(dim=256)) as memory:
        app = build(MemcoreStore(memory, index={"fields": ["text"]}))
        app.invoke({"user": "ann", "message": "remember I drink green tea at 4 pm"})
        app.invoke({"user": "ann", "message": "remember my robot is called Rex"})
    with LongTermMemory(path, HashingEmbedder(dim=256)) as memory:   # a later session
        app = build(MemcoreStore(memory, index={"fields": ["text"]}))
        return app.invoke({"user": "ann", "message": "what tea do I drink?"})["answer"]


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp() + "/memory"))
