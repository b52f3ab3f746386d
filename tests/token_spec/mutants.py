"""Mutation check: break the REAL sampler and show the losslessness tests fail.

Not collected by pytest (no test_ prefix). Usage, from the repository root:

    .venv/bin/python tests/token_spec/mutants.py [MUTANT ...]

For each mutant it copies token_spec/ and the statistical tests to a temporary
directory, applies one small edit to the copy (never to the working tree), runs
test_goodness_of_fit.py and test_markov_joint.py there, and prints the pytest
summary. Every mutant must make tests fail; the unmutated copy ("none") must pass.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ["stats_helpers.py", "markov_harness.py", "test_goodness_of_fit.py", "test_markov_joint.py"]

# name -> list of (file, old text, new text)
MUTANTS: dict[str, list[tuple[str, str, str]]] = {
    "none": [],
    # the recovered token drawn from p instead of max(0, p - q)
    "p_instead_of_residual": [
        ("sampler.py", "residual = (final_p - final_q).clamp(min=0.0)  # [B, V]",
         "residual = final_p.clamp(min=0.0)  # [B, V]"),
    ],
    # no "/ sum(residual)", with a categorical draw that assumes rows sum to 1
    "no_renormalisation": [
        ("sampler.py", "residual / mass.clamp(min=torch.finfo(mass.dtype).tiny)", "residual"),
        ("sampling.py", "dtype=torch.float64, device=probs.device) * total  # [..., 1]",
         "dtype=torch.float64, device=probs.device)  # [..., 1]"),
        ("sampling.py", "return torch.searchsorted(cdf, u, right=True).squeeze(-1)",
         "return torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[-1] - 1).squeeze(-1)"),
    ],
    # the bonus token drawn from row k-1 instead of row k
    "bonus_row_k_minus_1": [
        ("sampler.py", "final_p = p[b_idx, num_accepted]  # [B, V]",
         "final_p = p[b_idx, (num_accepted - (num_accepted == k).long()).clamp(min=0)]  # [B, V]"),
    ],
}


def run(name: str) -> str:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{name}-") as tmp:
        work = pathlib.Path(tmp)
        shutil.copytree(ROOT / "token_spec", work / "token_spec")
        shutil.copy(ROOT / "pyproject.toml", work)
        (work / "tests" / "token_spec").mkdir(parents=True)
        shutil.copy(ROOT / "tests" / "conftest.py", work / "tests")
        for test in TESTS:
            shutil.copy(ROOT / "tests" / "token_spec" / test, work / "tests" / "token_spec")
        for file, old, new in MUTANTS[name]:
            path = work / "token_spec" / file
            text = path.read_text()
            if old not in text:
                return f"{name}: mutation site not found in {file} (the source changed; update this script)"
            path.write_text(text.replace(old, new, 1))
        # cwd = the copy, so `import token_spec` resolves to the mutated package
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "tests/token_spec/test_goodness_of_fit.py",
             "tests/token_spec/test_markov_joint.py"],
            cwd=work, capture_output=True, text=True,
        )
        lines = [ln for ln in proc.stdout.splitlines() if " passed" in ln or " failed" in ln]
        return f"{name}: {lines[-1] if lines else proc.stdout[-500:]}"


if __name__ == "__main__":
    for mutant in sys.argv[1:] or list(MUTANTS):
        print(run(mutant), flush=True)
