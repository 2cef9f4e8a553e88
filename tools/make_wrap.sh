#!/usr/bin/env bash
# Prints a Meson wrap file that pins custream to one commit of this checkout, for a project that
# takes custream as a subproject (README.md, "Meson subproject").
#
#   bash tools/make_wrap.sh [--url URL] [REVISION] > your-project/subprojects/custream.wrap
#
# REVISION: a commit, tag or branch of this checkout (default HEAD), written as the full commit
# hash it names, so the wrap keeps building the same code. The url is URL, else this checkout's
# `origin` remote when it has one, else the checkout's own path: Meson clones from it on
# `meson setup`.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
url=
if [ "${1:-}" = --url ]; then
  [ $# -ge 2 ] || { echo "usage: make_wrap.sh [--url URL] [REVISION]" >&2; exit 2; }
  url=$2
  shift 2
fi
rev=${1:-HEAD}
commit=$(git -C "$src" rev-parse --verify --quiet "$rev^{commit}") || {
  echo "make_wrap.sh: '$rev' names no commit of $src" >&2
  exit 2
}
[ -n "$url" ] || url=$(git -C "$src" remote get-url origin 2>/dev/null || true)
[ -n "$url" ] || url=$src
version=$(sed -n "s/^  version: '\(.*\)',$/\1/p" "$src/meson.build")
cat <<WRAP
; custream $version at commit $commit (made by tools/make_wrap.sh).
; In your meson.build: custream_dep = dependency('custream')
; custream needs the CUDA toolkit headers at build time (-Dcustream:toolkit_root=/path/to/cuda,
; \$CUDA_PATH, or /usr/local/cuda) and nothing from CUDA at link time.

[wrap-git]
url = $url
revision = $commit

[provide]
custream = custream_dep
WRAP
