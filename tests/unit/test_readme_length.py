"""README.md stays short enough to read: at most 2,000 words of prose
(tools/readme_words.py counts them), the rest living in docs/."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import readme_words  # noqa: E402


def test_readme_within_limit():
    n = readme_words.prose_words((ROOT / "README.md").read_text())
    assert n <= readme_words.LIMIT, f"README.md has {n} words of prose, over {readme_words.LIMIT}"


def test_code_blocks_and_comments_not_counted():
    text = "one two\n```sh\nthree four five\n```\n<!-- six -->\nseven\n"
    assert readme_words.prose_words(text) == 3
