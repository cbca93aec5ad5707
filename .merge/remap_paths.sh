#!/usr/bin/env bash
# Issue 36 item 4 (branch i36s): the library surface narrowed to ten public
# modules. Re-runnable after merging other branches: it moves what is still at
# an old place and rewrites old module paths to new ones. Idempotent: a second
# run changes nothing. The lead deletes this file after merging.
#
#   old path                       new path
#   crate::mutants / src/mutants/  crate::conformance::mutants / src/conformance/mutants/
#   crate::verify  / src/verify/   crate::conformance::verify  / src/conformance/verify/
#   crate::report  / src/report.rs crate::conformance::report  / src/conformance/report.rs
#   src/conformance.rs             src/conformance/mod.rs
#   crate::adapters/ src/adapters/ crate::ops::adapters        / src/ops/adapters/
#   crate::fast    / src/fast/     crate::ops::fast            / src/ops/fast/
#   crate::tolerance/src/tolerance.rs crate::stats::tolerance  / src/stats/tolerance.rs
#   crate::stack   / src/stack/    crate::eval::stack          / src/eval/stack/
#   crate::input   / src/input.rs  crate::eval::input          / src/eval/input.rs
#   dropmc::registry::X            dropmc::X   (Registry, Family: re-exported at the root)
#   dropmc::error::Error           dropmc::Error
#
# Inside the crate `crate::registry`, `crate::error`, `crate::plot` and
# `crate::table` keep their paths (they are crate-private now).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

# 1. Moves: every file still at an old place goes to its new place.
move() { # old new
    local old=$1 new=$2
    if [ -d "$old" ]; then
        find "$old" -type f -name '*.rs' | while read -r f; do
            local dest="$new/${f#"$old"/}"
            mkdir -p "$(dirname "$dest")"
            git mv "$f" "$dest" 2>/dev/null || mv -n "$f" "$dest"
        done
        find "$old" -type d -empty -delete 2>/dev/null || true
    elif [ -f "$old" ]; then
        mkdir -p "$(dirname "$new")"
        git mv "$old" "$new" 2>/dev/null || mv -n "$old" "$new"
    fi
}
move src/conformance.rs src/conformance/mod.rs
move src/mutants src/conformance/mutants
move src/verify src/conformance/verify
move src/report.rs src/conformance/report.rs
move src/adapters src/ops/adapters
move src/fast src/ops/fast
move src/tolerance.rs src/stats/tolerance.rs
move src/stack src/eval/stack
move src/input.rs src/eval/input.rs

# 2. Paths, in code and doc comments. `\b` keeps `crate::report_x` and
# `crate::ops::fast` (already new) untouched, so a second run is a no-op.
# `crate::` paths are the library's own (src/ only: the Python crate and the
# tests have their own `crate`); `dropmc::` paths are rewritten everywhere.
listed() { git ls-files -co --exclude-standard -- "$@" | grep -E '\.(rs|md)$' || true; }
new_place='s/\b(PREFIX)::mutants\b/\1::conformance::mutants/g
s/\b(PREFIX)::verify\b/\1::conformance::verify/g
s/\b(PREFIX)::report\b/\1::conformance::report/g
s/\b(PREFIX)::adapters\b/\1::ops::adapters/g
s/\b(PREFIX)::fast\b/\1::ops::fast/g
s/\b(PREFIX)::tolerance\b/\1::stats::tolerance/g
s/\b(PREFIX)::stack\b/\1::eval::stack/g
s/\b(PREFIX)::input\b/\1::eval::input/g'
lib_files=$(listed src)
all_files=$(listed src tests examples benches python/src docs README.md)
# shellcheck disable=SC2086
sed -i -E -e "${new_place//PREFIX/crate}" $lib_files
# shellcheck disable=SC2086
sed -i -E \
    -e "${new_place//PREFIX/dropmc}" \
    -e 's/\bdropmc::registry::/dropmc::/g' \
    -e 's/\bdropmc::error::Error\b/dropmc::Error/g' \
    -e 's#\bsrc/mutants/#src/conformance/mutants/#g' \
    -e 's#\bsrc/verify/#src/conformance/verify/#g' \
    -e 's#\bsrc/report\.rs\b#src/conformance/report.rs#g' \
    -e 's#\bsrc/conformance\.rs\b#src/conformance/mod.rs#g' \
    -e 's#\bsrc/adapters/#src/ops/adapters/#g' \
    -e 's#\bsrc/fast/#src/ops/fast/#g' \
    -e 's#\bsrc/tolerance\.rs\b#src/stats/tolerance.rs#g' \
    -e 's#\bsrc/stack/#src/eval/stack/#g' \
    -e 's#\bsrc/input\.rs\b#src/eval/input.rs#g' \
    $all_files
