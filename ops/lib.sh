# ops/lib.sh: helpers shared by the ops/ scripts. Source it; do not run it.
# shellcheck shell=bash

PROJECT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# One-line progress messages and errors, always to stderr (stdout is for results such as a DSN).
say() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Where logs, pids and the persistent cluster live: $PROJECT/.state unless PG_SHELL_STATE_DIR is set.
state_dir() {
  local d=${PG_SHELL_STATE_DIR:-$PROJECT/.state}
  mkdir -p "$d" || die "cannot create state dir $d"
  printf '%s\n' "$d"
}

# Run a command as root (directly when we are root, else through sudo).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root for: $*"; fi
}

# apt_install PKG...: install the packages that are not installed yet, with apt's default sources.
# Runs 'apt-get update' at most once per process, and only when something is missing.
_apt_updated=
apt_install() {
  local p missing=() log
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log="$(state_dir)/apt.log"
  say "installing ${missing[*]} (log: $log)"
  if [ -z "$_apt_updated" ]; then
    as_root apt-get update -q >>"$log" 2>&1 || { tail -n 20 "$log" >&2; die "apt-get update failed"; }
    _apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$log" 2>&1 \
    || { tail -n 20 "$log" >&2; die "apt-get install ${missing[*]} failed"; }
}

# step [--show REGEX] LABEL COMMAND...: one set-up step, quietly. It prints one line, "LABEL … ok
# (N s)"; the command's stderr (its progress, apt's, pip's, docker build's) goes to a log file under
# the state dir, and its stdout is passed through (a DSN, an image id). With --show, the lines of
# that stderr that match REGEX are shown too, indented, as they come: the progress of a slow step
# (none match when the step only reuses what is there, so it stays one line). When the command
# fails, the line ends in "failed", the log is named with its last lines, and the script exits with
# the command's status.
step() {
  local show=
  if [ "$1" = --show ]; then show=$2; shift 2; fi
  local label=$1 started=$SECONDS log rc=0 head
  shift
  mkdir -p "$(state_dir)/logs"
  log="$(state_dir)/logs/${0##*/}.$(printf '%s' "$label" | tr -cs 'A-Za-z0-9' '-' | sed 's/-$//').log"
  head="${0##*/}: $label … "
  printf '%s' "$head" >&2
  if [ -n "$show" ]; then
    # Its stdout passes through (fd 3); its stderr goes to the log and the filter.
    local status=()
    if { "$@" 2>&1 >&3 3>&- | tee "$log" | _progress "$show" "$head" >&2
         status=("${PIPESTATUS[@]}"); } 3>&1; then :; fi
    rc=${status[0]}
  else
    "$@" 2>"$log" || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then
    printf 'ok (%d s)\n' $((SECONDS - started)) >&2
    return 0
  fi
  printf 'failed (exit %d; log: %s)\n' "$rc" "$log" >&2
  tail -n 15 "$log" | sed 's/^/    /' >&2
  exit "$rc"
}

# _progress REGEX HEAD: the lines of stdin matching REGEX, indented, below the step's line (HEAD,
# printed again after them, so the step still ends on its own "… ok" line).
_progress() {
  awk -v re="$1" -v head="$2" '
    $0 ~ re { if (!shown++) printf "\n"; print "    " substr($0, 1, 96); fflush() }
    END { if (shown) printf "%s", head }'
}
