"""Runs every code block of the README and of docs/*.md as written (issues 24 and 36).

Usage: python .ci/readme_blocks.py PYTHON [FILE.md ...]

* A ```python block runs in PYTHON (the venv `.ci/run` made with the README's own install
  commands), in a fresh temporary folder, and must exit 0.
* A ```sh line either runs here (in bash, from the repository's root, with target/release on
  PATH so that `dropmc` is the binary `.ci/run` built) and must exit 0, or is a line `.ci/run`
  itself runs word for word (the README's test and install commands).
* A ```text block is output, a formula or a diagram: it is shown, not run.
* Any other block, or a python/sh block that must not run here, is marked on the line just
  above its fence with `<!-- not run: REASON -->` (a GPU, minutes of sampling, a signature
  excerpt); the reason is printed. A block with no language, or a marker with no reason, is
  an error, so a new command in the docs cannot go unrun.
"""

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:(.*?)-->\s*$")


def commands(block):
    """The command lines of a shell block, comments and blank lines left out."""
    for line in block.splitlines():
        line = line.split("  #")[0].split(" # ")[0].strip()
        if line and not line.startswith("#"):
            yield line


def blocks(path):
    """(language, body, line number, reason it is not run or None) of each fenced block."""
    text = path.read_text()
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        reason = None
        if marker is not None:
            reason = marker.group(1).strip()
            if not reason:
                sys.exit(f"{path.name}:{text[: m.start()].count(chr(10)) + 1}: `not run` needs a reason")
        yield m.group(1), m.group(2), text[: m.start()].count("\n") + 1, reason


def arguments(argv):
    """(PYTHON, the .md files) from the command line, checked before anything runs: a
    block's `cargo` line would otherwise start a build for `--help` taken as the
    interpreter."""
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.exit(__doc__.split("\n\n")[1])
    # Absolute but not resolved: a venv's python is a link that must stay in the venv.
    python = os.path.abspath(argv[1])
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        sys.exit(f"PYTHON {argv[1]!r} is not an executable file\n{__doc__.split(chr(10) * 2)[1]}")
    missing = [f for f in argv[2:] if not pathlib.Path(f).is_file()]
    if missing:
        sys.exit(f"no such file: {', '.join(missing)}")
    return python, [pathlib.Path(f).resolve() for f in argv[2:]]


def main():
    python, files = arguments(sys.argv)
    files = files or [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    env = dict(os.environ, PATH=f"{ROOT / 'target' / 'release'}{os.pathsep}{os.environ['PATH']}")
    ran = 0
    for path in files:
        name = path.relative_to(ROOT).as_posix()
        for lang, body, line, reason in blocks(path):
            where = f"{name}:{line}"
            if reason is not None:
                print(f"{where}: {lang or 'plain'} block not run: {reason}", flush=True)
            elif lang == "text":
                continue
            elif lang == "python":
                print(f"{where}: python block ({len(body.splitlines())} lines)", flush=True)
                start = time.monotonic()
                with tempfile.TemporaryDirectory() as cwd:
                    subprocess.run([python, "-c", body], cwd=cwd, env=env, check=True)
                print(f"{where}: {time.monotonic() - start:.1f} s", flush=True)
                ran += 1
            elif lang == "sh":
                for command in commands(body):
                    if command in ci:
                        print(f"{where}: `{command}` is run by .ci/run", flush=True)
                        continue
                    print(f"{where}: {command}", flush=True)
                    start = time.monotonic()
                    subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, check=True)
                    print(f"{where}: {time.monotonic() - start:.1f} s", flush=True)
                    ran += 1
            else:
                sys.exit(
                    f"{where}: a {lang or 'plain'} block is neither run nor marked: label it "
                    "python, sh or text, or put `<!-- not run: REASON -->` above it"
                )
    if ran == 0:
        sys.exit("readme_blocks: no command block found")
    print(f"readme_blocks: {ran} blocks or lines ran")


if __name__ == "__main__":
    main()
