"""Count README.md's words the way its limit is set: prose only, without
code blocks (fenced ``` blocks) or HTML comments.

    python tools/readme_words.py [README.md]
"""
import pathlib
import re
import sys

LIMIT = 2000


def prose_words(text):
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    kept, in_code = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            kept.append(line)
    return len(" ".join(kept).split())


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "README.md"
    n = prose_words(pathlib.Path(path).read_text())
    print(f"{path}: {n} words without code blocks (limit {LIMIT})")
    sys.exit(0 if n <= LIMIT else 1)
