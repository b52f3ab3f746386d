"""``token_spec serve`` start-up options: bad values stop with one message naming the option."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from token_spec.cli import main  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["--max-rows", "0"], "--max-rows"),
    (["--speculative", "none", "--acceptance", "relaxed"], "needs a drafter"),
    (["--relaxed-threshold", "1.5"], "--relaxed-threshold"),
    (["--gamma", "-1"], "--gamma"),
])
def test_bad_serve_options_exit_with_a_message_naming_them(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(["serve", *argv])


def test_serve_parser_keeps_the_contract_flags():
    from token_spec.cli import build_parser

    args = build_parser().parse_args(["serve", "--host", "127.0.0.1", "--port", "8123", "--speculative", "suffix",
                                      "--gamma", "3", "--served-model-name", "m"])
    assert (args.host, args.port, args.speculative, args.gamma, args.served_model_name) == \
        ("127.0.0.1", 8123, "suffix", 3, "m")
