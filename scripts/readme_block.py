"""Print the README code block marked ``<!-- ci: NAME -->`` (so CI runs the README's commands as written).

usage: python3 scripts/readme_block.py NAME [README]
"""

import sys
from pathlib import Path


def block(name: str, readme: Path) -> str:
    lines = readme.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- ci: {name} -->") + 1
    if not lines[start].startswith("```"):
        raise SystemExit(f"{readme}: the line after '<!-- ci: {name} -->' does not open a code block")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[start + 1 : end]) + "\n"


if __name__ == "__main__":
    readme = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[1] / "README.md"
    sys.stdout.write(block(sys.argv[1], readme))
