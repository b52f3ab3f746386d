"""Training prompts for the draft model's build (``scripts/build_draft.py``).

The draft is distilled on the target's own greedy replies (on-policy text: what the
draft must predict at decode time), so the prompts decide what it learns. They are
composed from parts, seeded, in a fixed order:

* code, written: a task list x request templates ("write a function", "with asserts",
  "with type hints", ...);
* code, edited: real functions cut out of the Python standard library's source (the
  build's training files; its held-out files are never used) x edit requests (add type
  hints, docstrings, fix an injected bug, explain, test), so replies copy and rework
  code the way prompt-lookup-friendly requests do;
* agent: RLM-style REPL turns (a ``context`` variable, ``llm_query`` /
  ``llm_query_batched``, ``FINAL``): a first cell for an operation, or a continuation /
  fix of an earlier cell built from templates;
* chat and prose: questions and writing requests.

None of it is the benchmark's prompts (``token_spec/prompts.py``):
``check_disjoint`` refuses a build whose prompts share a line of 40+ characters with
them.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

__all__ = ["code_write_prompts", "code_edit_prompts", "agent_prompts", "chat_prompts", "check_disjoint"]

# --------------------------------------------------------------------------- code, written

WRITE_TASKS = [
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "counts the words in a text", "merges two sorted lists", "removes duplicates from a list while keeping the order",
    "computes the factorial of n", "finds the largest element in a list", "flattens a nested list",
    "checks whether two strings are anagrams", "converts Celsius to Fahrenheit", "returns the second largest number in a list",
    "counts how often each character occurs in a string", "chunks a list into pieces of size n",
    "computes the greatest common divisor of two numbers", "validates an email address with a regular expression",
    "reads a CSV file and returns a list of dicts", "writes a list of dicts to a JSON file",
    "returns the intersection of two lists", "rotates a list by k positions", "transposes a matrix given as a list of lists",
    "computes a running average of a list", "finds the longest word in a sentence", "capitalises the first letter of every word",
    "groups a list of words by their first letter", "returns the k most common elements of a list",
    "checks whether a list is sorted", "performs binary search on a sorted list", "implements bubble sort",
    "implements quicksort", "parses a date string like '2024-03-15' into a datetime", "computes the number of days between two dates",
    "counts the lines in a file", "finds all files with a given extension in a folder", "retries a function call up to three times",
    "measures how long a function takes to run", "caches the results of a function in a dict",
    "splits a text into sentences", "removes punctuation from a string", "converts a snake_case name to camelCase",
    "sums the digits of an integer", "checks whether a year is a leap year", "returns the prime factors of a number",
    "generates all permutations of a list", "computes the dot product of two vectors", "normalises a list of numbers to [0, 1]",
    "finds the index of the minimum value in a list", "zips two lists into a dict", "inverts a dictionary",
    "merges two dictionaries, summing values of shared keys", "returns the median of a list", "computes the mode of a list",
    "counts vowels and consonants in a string", "pads a string to a fixed width", "formats a number with thousands separators",
    "converts a Roman numeral to an integer", "converts an integer to binary without bin()", "checks balanced parentheses",
    "implements a stack with push, pop and peek", "implements a queue with two stacks", "reads a text file and counts each word",
    "finds duplicate files by their content hash", "downloads nothing but parses a URL into its parts with urllib",
    "computes the moving maximum over a window", "evaluates a simple arithmetic expression given as a string",
    "builds a frequency table of labels from a list of records", "filters a list of dicts by a key's value",
    "sorts a list of tuples by the second element", "returns the first non-repeating character of a string",
]

WRITE_TEMPLATES = [
    "Write a Python function that {task}.",
    "Write a Python function that {task}. Include an example call.",
    "Write a Python function that {task}, with three asserts that test it.",
    "Write a Python function with type hints and a docstring that {task}.",
    "How do I write Python code that {task}?",
    "Write a short, well-commented Python function that {task}.",
]

CLASS_TASKS = [
    ("Stack", "push, pop, peek and is_empty"), ("BankAccount", "deposit, withdraw and balance"),
    ("Timer", "start, stop and elapsed"), ("Inventory", "add_item, remove_item and total_value"),
    ("TodoList", "add, complete and pending"), ("Matrix", "add, multiply and transpose"),
    ("LRUCache", "get and put"), ("Temperature", "to_celsius and to_fahrenheit"),
    ("Rectangle", "area, perimeter and is_square"), ("Library", "add_book, lend and return_book"),
    ("RateLimiter", "allow and reset"), ("Graph", "add_edge, neighbours and has_path"),
]


def code_write_prompts(rng: random.Random) -> list[str]:
    """Each task with two of the request templates, and each class with one template."""
    out = []
    for task in WRITE_TASKS:
        for template in rng.sample(WRITE_TEMPLATES, 2):
            out.append(template.format(task=task))
    for name, methods in CLASS_TASKS:
        out.append(rng.choice([
            f"Write a Python class `{name}` with methods {methods}.",
            f"Implement a Python class {name} that supports {methods}. Show a short usage example.",
            f"Write a dataclass-based Python class `{name}` with {methods}, and type hints.",
        ]))
    return out


# --------------------------------------------------------------------------- code, edited

EDIT_REQUESTS = [
    "Add type hints to this function and return the full code:",
    "Add a docstring to the function below and return the complete code:",
    "Explain what this function does, step by step:",
    "Rewrite this function so it is easier to read, and return the full code:",
    "Write two unit tests with pytest for this function:",
    "Add comments to this code and return it:",
    "Rename the variables in this function to clearer names and return the code:",
    "Review this function: list possible problems, then show an improved version.",
]

BUG_REQUESTS = [
    "This function has a bug. Fix it and show the corrected code:",
    "Find the mistake in this function and return the fixed code:",
]

_BUG_SWAPS = [(" < ", " <= "), (" > ", " >= "), (" + 1", " - 1"), (" == ", " != "), ("return True", "return False"), (" and ", " or ")]


def stdlib_functions(files: list[Path], min_lines: int = 4, max_lines: int = 18, max_width: int = 90) -> list[str]:
    """Top-level functions of the given source files, 4-18 lines, no over-long lines, in file order."""
    out = []
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.decorator_list:
                continue
            body = lines[node.lineno - 1 : node.end_lineno]
            if min_lines <= len(body) <= max_lines and all(len(line) <= max_width for line in body):
                out.append("\n".join(body) + "\n")
    return out


def inject_bug(code: str, rng: random.Random) -> str | None:
    """The code with one comparison/offset/boolean swapped (None if nothing to swap)."""
    candidates = [(a, b) for a, b in _BUG_SWAPS if a in code]
    if not candidates:
        return None
    a, b = rng.choice(candidates)
    return code.replace(a, b, 1)


def code_edit_prompts(functions: list[str], n: int, rng: random.Random) -> list[str]:
    """``n`` edit requests over distinct stdlib functions (a quarter with an injected bug)."""
    picks = rng.sample(functions, min(n, len(functions)))
    out = []
    for i, code in enumerate(picks):
        if i % 4 == 3 and (buggy := inject_bug(code, rng)) is not None:
            request, code = rng.choice(BUG_REQUESTS), buggy
        else:
            request = rng.choice(EDIT_REQUESTS)
        out.append(f"{request}\n\n```python\n{code}```")
    return out


# --------------------------------------------------------------------------- agent

CONTEXTS = [
    "a long text",
    "a long document, one record per line",
    "lines like 'Date: Mar 02, 2023 || User: 81234 || Instance: text'",
    "a list of customer reviews, one per line",
    "a transcript of a meeting",
    "several news articles separated by blank lines",
    "a log file with one event per line",
    "questions from a quiz, one per line",
]

OPERATIONS = [
    "splits `context` into lines and asks llm_query to label each line as positive or negative, then prints the counts",
    "counts how many lines mention a date in 2023",
    "asks llm_query for the main topic of each paragraph and prints the topics",
    "finds the user id that appears most often and prints it",
    "extracts every line that contains the word 'error' and asks llm_query to explain the first five",
    "splits `context` into chunks of 1000 characters and calls llm_query_batched with one prompt per chunk",
    "builds a dict that maps each user to the number of their lines",
    "asks llm_query whether each question is about a person, a place or a number, and prints a table of counts",
    "keeps only the lines between two dates and prints how many remain",
    "samples 20 random lines and asks llm_query to classify them",
    "prints the first 10 lines and the total number of lines",
    "groups the lines by month and prints the number of lines per month",
    "asks llm_query to summarise each chunk of 50 lines, then asks it to combine the summaries",
    "finds the three most common words (ignoring stop words) and prints them",
    "parses every line into a dict with keys date, user and instance",
    "calls llm_query_batched on all lines in batches of 32 and collects the answers in a list",
    "counts the answers that contain 'yes' after asking llm_query a yes/no question about each line",
    "checks each review with llm_query for spam and stores the spam lines in a list",
    "computes the average length of the lines and prints the longest one",
    "asks llm_query to extract the names of people from each paragraph and prints the unique names",
]

FOLLOW_UPS = [
    "It worked. Now write the next ```repl``` cell: combine the results and call FINAL with the answer.",
    "It worked. Now write the next ```repl``` cell that prints the results sorted by count.",
    "It printed the results. Write the next ```repl``` cell that asks llm_query to check the top answer.",
    "It worked. Write the next ```repl``` cell that saves the counts in a variable `answer` and prints it.",
]

ERRORS = [
    "KeyError: 'positive'",
    "NameError: name 'chunk' is not defined",
    "TypeError: 'NoneType' object is not iterable",
    "IndexError: list index out of range",
    "AttributeError: 'list' object has no attribute 'split'",
    "ValueError: invalid literal for int() with base 10: ''",
]

REPL_SYSTEMS = [
    None,
    "You are an agent in a Python REPL. `context` holds the input and `llm_query(prompt)` asks a "
    "sub-model. Write code in ```repl blocks and finish with FINAL(answer).",
]


def _cell(rng: random.Random) -> str:
    """A small REPL cell from templates, with varied names."""
    var = rng.choice(["lines", "rows", "records", "chunks", "parts", "items"])
    out = rng.choice(["results", "labels", "answers", "outputs", "summaries"])
    split = rng.choice(['context.split("\\n")', "context.splitlines()", 'context.split("\\n\\n")'])
    question = rng.choice(["Classify this line", "Summarise this text", "Is this spam? Answer yes or no", "Which label fits best"])
    body = rng.choice([
        f"{out} = []\nfor {var[:-1]} in {var}:\n    {out}.append(llm_query(f\"{question}: {{{var[:-1]}}}\"))\n",
        f"{out} = [llm_query(f\"{question}: {{x}}\") for x in {var}]\n",
        f"prompts = [f\"{question}: {{x}}\" for x in {var}]\n{out} = llm_query_batched(prompts)\n",
    ])
    tail = rng.choice([f"print(len({out}))\n", f"print({out}[:5])\n", f"counts = {{}}\nfor r in {out}:\n    counts[r] = counts.get(r, 0) + 1\nprint(counts)\n"])
    return f"```repl\n{var} = {split}\n{body}{tail}```"


def agent_prompts(rng: random.Random) -> list[tuple[str | None, str, str]]:
    """(system or None, user message, assistant prefix) for REPL agent turns."""
    out = []
    for op in OPERATIONS:
        for ctx in CONTEXTS:
            tools = rng.choice(["a function `llm_query(prompt)`", "`llm_query(prompt)` and `llm_query_batched(prompts)`"])
            user = f"You are in a Python REPL with a variable `context` ({ctx}) and {tools}. Write a ```repl``` cell that {op}."
            out.append((rng.choice(REPL_SYSTEMS), user, rng.choice(["", "", "```repl\n"])))
    for _ in range(160):
        cell = _cell(rng)
        if rng.random() < 0.5:
            user = f"Here is your previous cell:\n\n{cell}\n\n{rng.choice(FOLLOW_UPS)}"
        else:
            user = f"Your cell failed:\n\n{cell}\n{rng.choice(ERRORS)}\n\nWrite the corrected ```repl``` cell."
        out.append((rng.choice(REPL_SYSTEMS), user, ""))
    return out


# --------------------------------------------------------------------------- chat and prose

CHAT = [
    "What is the capital of France, and what is it famous for?", "Explain photosynthesis in simple terms.",
    "Give me three tips for sleeping better.", "How does a refrigerator keep food cold?",
    "What causes the seasons on Earth?", "How do I make a good cup of tea?",
    "What is the difference between weather and climate?", "Why is the sky blue?",
    "How can I improve my public speaking?", "What are the benefits of regular exercise?",
    "Explain what a neural network is to a ten-year-old.", "What should I pack for a weekend hiking trip?",
    "How do vaccines work?", "What is inflation, and why does it matter?", "How do I start learning to play the guitar?",
    "What is the difference between a list and a tuple in Python?", "Why do cats purr?",
    "How can I save money on groceries?", "What is the water cycle?", "How do airplanes stay in the air?",
    "What are some good habits for a productive morning?", "Explain the rules of chess briefly.",
    "What is the difference between HTTP and HTTPS?", "How do I write a good cover letter?",
]

PROSE = [
    "Write a short story about a robot who learns to paint.", "Describe a busy market in the morning.",
    "Write a poem about the sea.", "Write a paragraph about the history of the bicycle.",
    "Describe a thunderstorm from the point of view of a child.", "Write a short story about a lost key.",
    "Write a letter to a friend describing your new home.", "Describe a quiet library at night.",
    "Write a short fable about a fox and a crow.", "Describe a mountain village in winter.",
    "Write a paragraph about why reading matters.", "Write a short story about a train that never stops.",
]


def chat_prompts() -> list[str]:
    return CHAT + PROSE


# --------------------------------------------------------------------------- disjointness


def check_disjoint(prompts: list[str], bench: list[str], min_len: int = 40) -> None:
    """Refuse training prompts that share a line of ``min_len``+ characters with a benchmark prompt."""
    bench_lines = {line.strip() for text in bench for line in text.splitlines() if len(line.strip()) >= min_len}
    for text in prompts:
        for line in text.splitlines():
            if line.strip() in bench_lines:
                raise ValueError(f"training prompt shares a line with a benchmark prompt: {line.strip()[:80]!r}")
