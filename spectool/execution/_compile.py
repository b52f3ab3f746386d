"""Compiling a cell without holding the event loop's thread for long.

``compile()`` is one C call that holds the GIL from start to end: a 300 KB cell takes
a tenth of a second or more, and no worker thread would let the loop run meanwhile.
:func:`compile_cell` therefore compiles a cell longer than
``host_budget.OFFLOOP_COMPILE_CHARS`` in a child process (the same interpreter, with
``-I -S``) and loads the code object it sends back with ``marshal`` (milliseconds);
a shorter cell is compiled in place. The result is the same either way: the same code
object, or the same exception (its builtin class rebuilt with the same arguments, so
``str(error)`` and its attributes match what ``compile`` raises in place). If the
child cannot answer (it could not start, or died), the cell is compiled in place, as
before: correctness first.

Both paths compile with the same explicit flags, ``FLAGS``: cells have always been
compiled with ``from __future__ import annotations`` in effect (``compile`` inherits
the future imports of the module that calls it, and the executor's module has that
one), so annotations stay strings, in place and in the child alike; the child also
compiles at the host's optimisation level.
"""

from __future__ import annotations

import __future__
import builtins
import marshal
import sys
from types import CodeType

import anyio

from .._parse import compile_code
from ..host_budget import OFFLOOP_COMPILE_CHARS

__all__ = ["compile_cell", "FLAGS"]

FLAGS = __future__.annotations.compiler_flag

# reads the source (UTF-8, surrogates passed through) on stdin; answers b"C" + the
# marshalled code object, or b"E" + marshal of (exception class name, its arguments)
_CHILD = r"""
import marshal, sys
source = sys.stdin.buffer.read().decode("utf-8", "surrogatepass")
try:
    code = compile(source, sys.argv[1], "exec", int(sys.argv[2]), True, int(sys.argv[3]))
except Exception as exc:
    try:
        out = b"E" + marshal.dumps((type(exc).__name__, exc.args))
    except ValueError:          # arguments marshal cannot write: let the host compile
        sys.exit(3)
else:
    out = b"C" + marshal.dumps(code)
sys.stdout.buffer.write(out)
"""


async def compile_cell(source: str, filename: str = "<cell>") -> CodeType:
    """``compile(source, filename, "exec", FLAGS, True)``, off the event loop's thread
    when large."""
    if len(source) <= OFFLOOP_COMPILE_CHARS:
        return compile_code(source, filename, FLAGS)
    answer = await _ask_child(source, filename)
    if answer is None:
        return compile_code(source, filename, FLAGS)
    kind, payload = answer[:1], answer[1:]
    if kind == b"C":
        code = marshal.loads(payload)
        if type(code) is CodeType:
            return code
    elif kind == b"E":
        error = _rebuilt(marshal.loads(payload))
        if error is not None:
            raise error
    # an answer we do not understand
    return compile_code(source, filename, FLAGS)


async def _ask_child(source: str, filename: str) -> bytes | None:
    try:
        data = source.encode("utf-8", "surrogatepass")
        # the host's optimisation level too (``-O`` drops asserts), which the in-place
        # compile uses
        done = await anyio.run_process([sys.executable, "-I", "-S", "-c", _CHILD, filename,
                                        str(FLAGS), str(sys.flags.optimize)],
                                       input=data, check=False)
    except (OSError, ValueError):
        return None
    if done.returncode != 0 or not done.stdout:
        return None
    return done.stdout


def _rebuilt(answer: object) -> BaseException | None:
    """The child's exception, as its builtin class with the same arguments."""
    if type(answer) is not tuple or len(answer) != 2:
        return None
    name, args = answer
    cls = getattr(builtins, name, None) if type(name) is str else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)) or type(args) is not tuple:
        return None
    try:
        return cls(*args)
    except Exception:
        return None
