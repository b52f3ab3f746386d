"""Benchmark prompts for ``token_spec bench``, five per domain, as chat messages.

Domains:

* ``code``  : Python tasks. Three of the five hand the model code to edit (add type
  hints, fix a bug, add docstrings), the common real-world case where the answer
  re-uses much of the prompt (what prompt lookup exploits); two ask for new code.
* ``agent`` : RLM-style agent turns: the model writes a ```` ```repl ```` cell over a
  ``context`` variable with ``llm_query`` / ``llm_query_batched``; two show an earlier
  cell to continue or fix, as agent loops do.
* ``chat``  : short assistant questions.
* ``prose`` : open-ended writing.

Chat and prose carry little that a lookup drafter can copy; they are the honest
counterweight to code and agent code.
"""

from __future__ import annotations

__all__ = ["DOMAINS", "prompts_for"]

_CODE_SNIPPET = '''def mean(values):
    total = 0
    for v in values:
        total += v
    return total / len(values)


def variance(values):
    m = mean(values)
    total = 0
    for v in values:
        total += (v - m) ** 2
    return total / len(values)
'''

_BUGGY = '''def find_max(items):
    best = 0
    for i in range(1, len(items)):
        if items[i] > best:
            best = items[i]
    return best
'''

_PARSER = '''def parse_line(line):
    name, age, city = line.strip().split(",")
    return {"name": name, "age": int(age), "city": city}


def parse_file(path):
    rows = []
    with open(path) as f:
        for line in f:
            rows.append(parse_line(line))
    return rows
'''

_CELL = '''```repl
chunks = context.split("\\n\\n")
summaries = []
for i, chunk in enumerate(chunks):
    summary = llm_query(f"Summarise chunk {i}: {chunk}")
    summaries.append(summary)
print(len(summaries))
```'''

_CELL_ERR = '''```repl
lines = context.splitlines()
labels = [llm_query(f"Label this line as spam or ham: {line}") for line in lines]
counts = {}
for label in labels:
    counts[label] = counts[label] + 1
print(counts)
```
KeyError: 'spam'
'''

DOMAINS: dict[str, list[str]] = {
    "code": [
        f"Add type hints to these functions and return the full code:\n\n```python\n{_CODE_SNIPPET}```",
        f"This function is wrong for lists of negative numbers. Fix it and show the corrected code:\n\n```python\n{_BUGGY}```",
        f"Add a docstring to each function below and return the complete code:\n\n```python\n{_PARSER}```",
        "Write a Python function `is_palindrome(s)` that ignores case and spaces, with three asserts.",
        "Write a Python class `Counter` with methods `increment`, `decrement` and `reset`.",
    ],
    "agent": [
        "You are in a Python REPL with a variable `context` (a long text) and a function "
        "`llm_query(prompt)`. Write a ```repl``` cell that splits `context` into paragraphs, "
        "asks llm_query for a one-line summary of each and prints the summaries.",
        f"Here is your previous cell:\n\n{_CELL}\n\nIt worked. Now write the next ```repl``` cell: "
        "join the summaries into one prompt and ask llm_query for the overall answer, then print it.",
        f"Your cell failed:\n\n{_CELL_ERR}\nWrite the corrected ```repl``` cell.",
        "In the REPL, `context` holds lines like 'Date: Jun 29, 2022 || User: 44436 || Instance: text'. "
        "Write a ```repl``` cell that parses every line into a dict with keys date, user and instance, "
        "and prints how many distinct users there are.",
        "Write a ```repl``` cell that builds one prompt per chunk of `context` (chunks of 2000 characters), "
        "calls `llm_query_batched(prompts)` and prints the answers that contain the word 'yes'.",
    ],
    "chat": [
        "What is the capital of Australia, and why is it not Sydney?",
        "Give me three tips for staying focused while working from home.",
        "How do I politely decline a meeting invitation?",
        "What is the difference between a virus and a bacterium?",
        "Suggest a name for a small bakery and explain your choice.",
    ],
    "prose": [
        "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        "Describe a walk through a forest in autumn.",
        "Write a paragraph about the history of the printing press.",
        "Write a short letter thanking a teacher who changed your life.",
        "Describe the city of the future in one paragraph.",
    ],
}


def prompts_for(domain: str) -> list[list[dict]]:
    """The domain's prompts as single-turn chat message lists."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; choose from {sorted(DOMAINS)}")
    return [[{"role": "user", "content": text}] for text in DOMAINS[domain]]
