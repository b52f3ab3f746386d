"""Agent loops on the speculative runtime (installed as ``spectool_agents``).

The folder is ``agents/`` but it installs under the import name ``spectool_agents``
so it never collides with the OpenAI Agents SDK's ``agents`` package.
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
