"""The pure stages import no I/O or concurrency library (checked on their source)."""

import ast
import pathlib

import spectool

ROOT = pathlib.Path(spectool.__file__).parent
PURE = [ROOT / "stream" / "segmenter.py", ROOT / "keys.py",
        *sorted((ROOT / "shadow").glob("*.py"))]
FORBIDDEN = {"anyio", "asyncio", "trio", "threading", "concurrent", "multiprocessing", "socket",
             "subprocess", "os", "io", "pathlib", "shutil", "signal", "select", "selectors",
             "litellm", "httpx", "requests", "urllib", "ctypes", "pickle", "marshal", "importlib"}


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_pure_stage_files_exist():
    assert len(PURE) >= 8


def test_pure_stages_import_no_io_library():
    for path in PURE:
        bad = imported_modules(path) & FORBIDDEN
        assert not bad, f"{path.name} imports {bad}"
