#!/usr/bin/env bash
# Fill a valuepath download cache from the read-only shared data tree, so that the
# prepare_* scripts, the tests and CI run offline.
#
#   usage: scripts/fill_cache_from_shared.sh [SHARED_DATA_DIR] [CACHE_DIR] [--copy]
#          SHARED_DATA_DIR  default ../shared/data (relative to the repo root)
#          CACHE_DIR        default $VALUEPATH_CACHE, else ~/.cache/valuepath
#          --copy           copy the files instead of symlinking them
#
# The cache layout is the shared tree's layout (see docs/data.md):
#   tokenizers/gpt2/{encoder.json,vocab.bpe,tokenizer.json}
#   tokenizers/gpt-neox-20b/tokenizer.json
#   tokenizers/llama2/tokenizer.model
#   tinyshakespeare/input.txt
#   corpus/gutenberg-en-50mb/{corpus.txt.gz,sources.jsonl}
#   samples/...
# Files already in the cache are left alone (re-running is harmless). Only files listed
# in the shared MANIFEST's SHA256SUMS are taken, and each is checked against it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
copy=0
pos=()
for a in "$@"; do
  case "$a" in
    --copy) copy=1 ;;
    # the comment block under the shebang, up to the first line that is not a comment
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) pos+=("$a") ;;
  esac
done
shared="${pos[0]:-$repo/../shared/data}"
cache="${pos[1]:-${VALUEPATH_CACHE:-$HOME/.cache/valuepath}}"

if [ ! -f "$shared/SHA256SUMS" ]; then
  echo "error: $shared/SHA256SUMS not found; pass the shared data directory as the first argument" >&2
  exit 1
fi
shared="$(cd "$shared" && pwd)"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"

# Verify the shared files before trusting them (fast: ~28 MB).
(cd "$shared" && sha256sum --quiet -c SHA256SUMS) || {
  echo "error: $shared does not match its SHA256SUMS" >&2
  exit 1
}

n=0
while read -r _sum rel; do
  rel="${rel#\*}"
  rel="${rel#./}"
  dest="$cache/$rel"
  if [ -e "$dest" ]; then
    continue
  fi
  if [ -L "$dest" ]; then rm -f "$dest"; fi  # a dangling link from an old shared path
  mkdir -p "$(dirname "$dest")"
  if [ "$copy" = 1 ]; then
    cp "$shared/$rel" "$dest.part" && mv "$dest.part" "$dest"
  else
    ln -s "$shared/$rel" "$dest"
  fi
  n=$((n + 1))
done < "$shared/SHA256SUMS"
echo "cache $cache: added $n file(s) from $shared"
