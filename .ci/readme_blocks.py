"""Runs every command block of the README as written (issue 24).

Usage: python .ci/readme_blocks.py PYTHON

* A ```python block runs in PYTHON (the venv `.ci/run` made with the README's own install
  commands) and must exit 0.
* A ```sh line either runs here (in bash, from the repository's root) and must exit 0, or is
  a line `.ci/run` itself runs word for word (the README's test and install commands); a line
  that is neither is an error, so a new README command cannot go unrun.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def commands(block):
    """The command lines of a shell block, comments and blank lines left out."""
    for line in block.splitlines():
        line = line.split("  #")[0].split(" # ")[0].strip()
        if line and not line.startswith("#"):
            yield line


def main():
    python = sys.argv[1]
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    ran = 0
    for lang, body in FENCE.findall(readme):
        if lang == "python":
            print(f"readme: python block ({len(body.splitlines())} lines)", flush=True)
            subprocess.run([python, "-c", body], cwd=ROOT, check=True)
            ran += 1
        elif lang == "sh":
            for line in commands(body):
                if line in ci:
                    print(f"readme: `{line}` is run by .ci/run", flush=True)
                    continue
                print(f"readme: {line}", flush=True)
                subprocess.run(["bash", "-c", line], cwd=ROOT, check=True)
                ran += 1
    if ran == 0:
        sys.exit("readme: no command block found")
    print(f"readme: {ran} blocks or lines ran")


if __name__ == "__main__":
    main()
