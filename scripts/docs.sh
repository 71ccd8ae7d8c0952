#!/usr/bin/env bash
# Build the documentation site (mkdocs.yml, docs/) with --strict into a temporary folder and throw it away: a broken
# link or anchor, a missing page, a page left out of the nav or a missing README section fails the build.
# Installs nothing: mkdocs, mkdocs-material and mkdocstrings-python (docs/api.md) come with the `docs` (and `dev`)
# extra.
#   bash scripts/docs.sh            (scripts/test.sh runs it in the main tier's environment)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python}
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && [ -z "${VIRTUAL_ENV:-}" ]; then PY=.venv/bin/python; fi
if ! "$PY" -c "import mkdocs, material, mkdocstrings_handlers.python" 2>/dev/null; then
  echo "error: mkdocs, mkdocs-material or mkdocstrings-python is not installed for $PY" >&2
  echo "hint: pip install -e '.[docs]' (bash scripts/setup.sh installs it with the dev extra)" >&2
  exit 1
fi
export NO_MKDOCS_2_WARNING=1
site=$(mktemp -d "${TMPDIR:-/tmp}/rag-curriculum-site.XXXXXX")
trap 'rm -rf "$site"' EXIT
# (not --quiet: it hides the warnings that --strict counts, and then nothing fails)
"$PY" -m mkdocs build --strict --clean --config-file mkdocs.yml --site-dir "$site" 2>&1 | sed '/^INFO /d'
echo "docs: built $(find "$site" -name '*.html' | wc -l | tr -d ' ') pages with --strict"
