#!/usr/bin/env bash
# A virtual environment built once per set of pins, copied back for every later checkout:
# `make setup` in a fresh clone (CI) then takes seconds instead of the minute pip needs to
# install TensorFlow again (docs/development.md, "Environments"). A venv names its own
# path in bin/ (the scripts' first lines, activate) and pyvenv.cfg; a copy gets its new
# path there. The copy's files are hard links to the kept ones, as uv links its cache
# into environments: pip replaces files, never writes into them, so no environment
# changes another (an editor writing into an installed file would change them all). The
# checkout's own package (`pip install -e .`) is never kept: each checkout installs it
# into its copy, so two checkouts never share one.
#
#   scripts/venvs.sh restore VENV KEY   VENV becomes a copy of the one kept for KEY
#                                       (exit 1 and VENV untouched where none is kept)
#   scripts/venvs.sh keep VENV KEY      keep VENV for KEY (before `pip install -e .`)
#
# KEY says what was installed: the Makefile's is the environment's name, then a digest
# of the interpreter's version and the requirement files. One is kept per name (KEY up
# to its last '-'): keeping a new one removes the older. Kept in DLSCALE_VENV_CACHE
# (default ~/.cache/dlscale/venvs); delete that folder to build every venv again.
set -euo pipefail

usage() { echo "usage: $0 restore|keep VENV KEY" >&2; exit 2; }
[ $# -eq 3 ] || usage
action=$1 venv=$2 key=$3
case $key in */* | .* | "") echo "$0: KEY '$key' must be a plain name" >&2; exit 2 ;; esac
cache=${DLSCALE_VENV_CACHE:-$HOME/.cache/dlscale/venvs}
kept=$cache/$key
mark=.dlscale-venv-path  # in a kept copy: the path it was built at

copy() {  # copy FROM TO: TO's files are FROM's, linked where both are on one file system
    cp -al "$1" "$2" 2>/dev/null || { rm -rf "$2"; cp -a "$1" "$2"; }
}

relocate() {  # relocate VENV OLD NEW: NEW for OLD in VENV's bin/ scripts and pyvenv.cfg
    python3 - "$@" <<'EOF'
import os
import pathlib
import shutil
import sys

venv, old, new = pathlib.Path(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode()
for path in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]:
    if path.is_file() and not path.is_symlink():  # bin/python links to the interpreter
        data = path.read_bytes()
        if old in data:  # a new file, not a write into the one the kept copy links to
            fresh = path.with_name(path.name + ".relocated")
            fresh.write_bytes(data.replace(old, new))
            shutil.copymode(path, fresh)
            os.replace(fresh, path)
EOF
}

case $action in
restore)
    [ -f "$kept/$mark" ] || exit 1
    old=$(cat "$kept/$mark")
    new=$(realpath -m "$venv")
    # a script's first line (at most 127 bytes) cannot name a path with a space, nor a
    # long one (pip then writes another kind of first line): such a venv is built
    case $new in *[[:space:]]*) exit 1 ;; esac
    [ ${#new} -le 100 ] || exit 1
    rm -rf "$venv"
    mkdir -p "$(dirname "$new")"
    if ! copy "$kept" "$venv" || ! relocate "$venv" "$old" "$new"; then
        rm -rf "$venv"  # a half copy is no environment: the caller builds one
        exit 1
    fi
    rm -f "$venv/$mark"
    echo "venvs: $venv is a copy of $kept"
    ;;
keep)
    [ -x "$venv/bin/python" ] || { echo "$0: $venv is not a virtual environment" >&2; exit 2; }
    mkdir -p "$cache"
    tmp=$(mktemp -u "$cache/.$key.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    copy "$venv" "$tmp"
    realpath "$venv" > "$tmp/$mark"
    for other in "$cache/${key%-*}"-*; do  # the older ones of this name
        if [ -e "$other" ] && [ "$other" != "$kept" ]; then rm -rf "$other"; fi
    done
    if [ -f "$kept/$mark" ]; then exit 0; fi  # kept meanwhile by another checkout
    rm -rf "$kept"
    mv -T "$tmp" "$kept"
    trap - EXIT
    echo "venvs: kept $venv as $kept"
    ;;
*) usage ;;
esac
