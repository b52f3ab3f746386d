"""`python -m token_spec.step_profile` prints one time split per configuration."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.model


def test_step_profile_prints_the_split(capsys, fast_target):
    from token_spec.step_profile import main

    assert main(["--configs", "bf16-unpadded", "--repeats", "1", "--context", "16"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("bf16-unpadded") and "layer GEMMs" in line and "LM head" in line and "other" in line


def test_step_profile_refuses_an_unknown_configuration():
    from token_spec.step_profile import main

    with pytest.raises(SystemExit, match="unknown configuration"):
        main(["--configs", "fp16"])
