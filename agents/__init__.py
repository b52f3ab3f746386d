"""Agent loops on the speculative runtime (installed as ``spectool_agents``).

The folder is ``agents/`` but it installs under the import name ``spectool_agents``
so it never collides with the OpenAI Agents SDK's ``agents`` package.

Every agent here reads model streams through ``spectool.stream.adapters`` (str, bytes,
OpenAI / litellm / Anthropic / LangChain chunks). ``spectool_agents.integrations`` holds the
drop-in pieces for smolagents, DSPy RLM, LangGraph and the OpenAI Agents SDK
(imported on demand, never from here: each needs its framework installed).
"""

from .function_agent import FunctionAgent, FunctionAgentResult, MessageResult, ToolCall
from .models import (
    FunctionSubModel,
    LiteLLMModel,
    LiteLLMSubModel,
    Model,
    ScriptedModel,
    SubModel,
    TokenSpecModel,
    aclose_litellm,
)
from .partial_json import IncompleteJson, JsonTracker
from .repl_agent import AgentResult, ReplAgent, TurnRecord
from .wrapping import runtime_for, tee, tools_from_table

__all__ = [
    "AgentResult",
    "FunctionAgent",
    "FunctionAgentResult",
    "FunctionSubModel",
    "IncompleteJson",
    "JsonTracker",
    "LiteLLMModel",
    "MessageResult",
    "LiteLLMSubModel",
    "Model",
    "ReplAgent",
    "ScriptedModel",
    "SubModel",
    "TokenSpecModel",
    "ToolCall",
    "TurnRecord",
    "aclose_litellm",
    "runtime_for",
    "tee",
    "tools_from_table",
]
