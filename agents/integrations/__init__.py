"""Drop-in use of spectool inside other agent frameworks (each module imports its
framework lazily; none is a dependency of the core install).

* ``smolagents``: ``SpectoolExecutor``, the code executor of smolagents' ``CodeAgent``
  (``CodeAgent(..., executor=SpectoolExecutor(pure={...}))``).
* ``dspy``: ``spectool_interpreter(...)``, an ``interpreter_factory`` for ``dspy.RLM``.
* ``langgraph``: ``SpecToolNode``, a LangGraph-style tool node for JSON function
  calling (a graph node over ``state["messages"]``, and a streaming form that starts
  pure tools while the model's ``AIMessageChunk``s still arrive).
* ``openai_agents``: ``SpeculativeTools``, streamed tool calls of the OpenAI Agents
  SDK: pure ``FunctionTool``s start while ``Runner.run_streamed`` is still streaming
  their arguments; the SDK's own tool call then claims the result.
* ``blocking``: ``BlockingRuntime``, a ``spectool.Runtime`` driven from synchronous
  code (what the smolagents and DSPy seams call).
"""
