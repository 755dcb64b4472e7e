#!/usr/bin/env bash
# Did this change make training cost more joules per token? greenbench's CI recipe for a
# repository that is not greenbench: one greenbench (installed once, pinned), the repository's own
# suite run at the base and at the head commit interleaved on this machine, then `greenbench
# compare` judges head against base. Exit status: 0 ok, 3 a regression, 4 inconclusive (too few
# repeats, or a run stored contended: the machine was shared) or unstable (only with STRICT=1),
# 2 bad input. What GitHub's composite action (action.yml beside
# this file) runs, and what any other CI system can run as it is (docs/user-workloads.md).
#
# On GitHub, after the verdict: the step's outputs (verdict, exit-code, summary, comment-url) go
# to $GITHUB_OUTPUT, and on a pull request the verdict table goes to one comment, edited on each
# new push (python -m greenbench.compare.pr_comment; its token needs pull-requests: write). A
# fork's pull request, or a token that may not write, gets a note in the job summary instead;
# the comment never changes the exit status.
#
# usage: energy-check.sh BASE_REF [HEAD_REF]      (inside a clone holding both commits)
#
# environment:
#   SUITE       the repository's suite file, relative to its root (required)
#   ROUNDS      interleaved rounds, each running the suite at both commits (default 2); with the
#               suite's repeats they make the repeats per side: 5 or more for α = 0.01
#   THRESHOLD   the smallest change that counts as a regression (default 5%)
#   METRICS     the metrics judged (default: joules_per_token tokens_per_s)
#   STRICT      1: an inconclusive or unstable verdict fails too (exit 4)
#   ALLOW_CONTENDED  1: judge runs stored contended (another process shared the machine)
#               instead of calling their comparisons inconclusive (default: 0, they are)
#   INSTALL     auto (default): a commit whose root has pyproject.toml or setup.py is installed
#               (without dependencies) into a folder of its own, first on PYTHONPATH, so its
#               entry points register and its version is recorded; no: its root goes on
#               PYTHONPATH instead; yes: always install
#   PIP_ARGS    more options for that `pip install` (e.g. "--no-build-isolation" offline)
#   PYTHON      the Python that has greenbench (default: python3)
#   RUN_ARGS    more options for `greenbench run` (e.g. "--repeats 5 --device cuda")
#   WORK        working folder (default: a new temporary one)
#   SUMMARY     file the verdict (Markdown) is appended to (default: $GITHUB_STEP_SUMMARY)
#   COMMENT     auto (default): comment on a pull request's event (GITHUB_EVENT_PATH, with
#               GITHUB_TOKEN, GITHUB_REPOSITORY, GITHUB_API_URL); no: never
set -euo pipefail

BASE_REF=${1:?usage: energy-check.sh BASE_REF [HEAD_REF]}
HEAD_REF=${2:-HEAD}
: "${SUITE:?set SUITE to the suite file, relative to the repository root}"
ROUNDS=${ROUNDS:-2}
THRESHOLD=${THRESHOLD:-5%}
METRICS=${METRICS:-joules_per_token tokens_per_s}
INSTALL=${INSTALL:-auto}
PYTHON=${PYTHON:-python3}
SUMMARY=${SUMMARY:-${GITHUB_STEP_SUMMARY:-}}
COMMENT=${COMMENT:-auto}
REPO=$(git rev-parse --show-toplevel)
WORK=${WORK:-$(mktemp -d)}
DB="$WORK/energy.duckdb"
mkdir -p "$WORK"

if ! "$PYTHON" -m greenbench --version >/dev/null; then
  echo "error: $PYTHON has no greenbench (install it first, pinned)" >&2
  exit 2
fi

cleanup() {
  for side in base head; do
    git -C "$REPO" worktree remove --force "$WORK/$side" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

declare -A SIDE_PATH
for side in base head; do
  ref=$BASE_REF
  [ "$side" = head ] && ref=$HEAD_REF
  git -C "$REPO" worktree add --quiet --detach "$WORK/$side" "$ref"
  if [ ! -f "$WORK/$side/$SUITE" ]; then
    echo "error: $SUITE does not exist at $side ($ref)" >&2
    exit 2
  fi
  packaged=no
  if [ -f "$WORK/$side/pyproject.toml" ] || [ -f "$WORK/$side/setup.py" ]; then packaged=yes; fi
  if [ "$INSTALL" = yes ] || { [ "$INSTALL" = auto ] && [ "$packaged" = yes ]; }; then
    # shellcheck disable=SC2086  # PIP_ARGS are words
    "$PYTHON" -m pip install --quiet --no-deps --target "$WORK/site-$side" ${PIP_ARGS:-} \
      "$WORK/$side"
    SIDE_PATH[$side]="$WORK/site-$side${PYTHONPATH:+:$PYTHONPATH}"
  else
    SIDE_PATH[$side]="$WORK/$side${PYTHONPATH:+:$PYTHONPATH}"
  fi
done

# base, head, then head, base, ...: slow drifts of the machine hit both sides alike
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="base head"; else order="head base"; fi
  for side in $order; do
    echo "::group::round $round of $ROUNDS: $side"
    # shellcheck disable=SC2086  # RUN_ARGS are words
    (cd "$WORK/$side" && PYTHONPATH="${SIDE_PATH[$side]}" "$PYTHON" -m greenbench \
      run --suite "$SUITE" --label "$side" --db "$DB" ${RUN_ARGS:-})
    echo "::endgroup::"
  done
done

args=(--db "$DB" --baseline base --candidate head --threshold "$THRESHOLD")
for metric in $METRICS; do args+=(--metric "$metric"); done
[ "${STRICT:-0}" = 1 ] && args+=(--strict)
[ "${ALLOW_CONTENDED:-0}" = 1 ] && args+=(--allow-contended)
# compare appends Markdown to $GITHUB_STEP_SUMMARY itself: unset here, as this script appends it
status=0
env -u GITHUB_STEP_SUMMARY "$PYTHON" -m greenbench compare "${args[@]}" --format markdown \
  >"$WORK/verdict.md" 2>"$WORK/compare.err" || status=$?
cat "$WORK/compare.err" >&2
cat "$WORK/verdict.md"
if [ -n "$SUMMARY" ]; then
  { echo "## Energy: $HEAD_REF against $BASE_REF"; echo; cat "$WORK/verdict.md"; } >>"$SUMMARY"
fi
# the same verdict as JSON, for the outputs and the pull-request comment
"$PYTHON" -m greenbench compare "${args[@]}" --format json >"$WORK/verdict.json" 2>/dev/null || true
base_sha=$(git -C "$REPO" rev-parse --verify --quiet "$BASE_REF^{commit}" || echo "$BASE_REF")
head_sha=$(git -C "$REPO" rev-parse --verify --quiet "$HEAD_REF^{commit}" || echo "$HEAD_REF")
comment_args=(--markdown "$WORK/verdict.md" --verdict "$WORK/verdict.json" --exit-code "$status"
  --errors "$WORK/compare.err" --key "$SUITE" --base "$base_sha" --head "$head_sha")
[ "$COMMENT" = no ] && comment_args+=(--comment no)
[ -n "$SUMMARY" ] && comment_args+=(--summary "$SUMMARY")
"$PYTHON" -m greenbench.compare.pr_comment "${comment_args[@]}" ||
  echo "::warning::energy check: the pull-request comment and outputs failed (see above)"
exit "$status"
