"""Adapters that put memcore behind the memory interfaces of agent frameworks.

Each lives in its own module and imports its framework only there (an optional extra):
``memcore.integrations.langgraph`` needs ``pip install 'memcore-agent[langgraph]'``.
"""
