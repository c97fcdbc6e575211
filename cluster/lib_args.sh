# Argument helpers shared by the cluster scripts (sourced, not run): optional positional arguments
# up to a "--" and integer checks that exit 2 with the argument's name.
# take_positionals NAME... -- ARGS...: assigns ARGS in order to the NAMEs until ARGS run out or reach
# a "--"; what follows that "--" (or the unassigned ARGS) is left in the array REST.
take_positionals() {
  local names=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do names+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local n
  for n in "${names[@]}"; do
    if [ $# -gt 0 ] && [ "$1" != "--" ]; then printf -v "$n" '%s' "$1"; shift; fi
  done
  [ $# -gt 0 ] && [ "$1" = "--" ] && shift
  REST=("$@")
}
# require_int LABEL VALUE [non-negative]: exits 2 unless VALUE is a positive integer (or, with a third
# argument, a non-negative one), naming LABEL.
require_int() {
  local kind="a positive integer"
  [ $# -gt 2 ] && kind="a non-negative integer"
  case "$2" in
    '' | *[!0-9]*) echo "$0: $1 must be $kind, got '$2'" >&2; exit 2 ;;
  esac
  if [ $# -le 2 ] && [ $((10#$2)) -eq 0 ]; then echo "$0: $1 must be $kind, got '$2'" >&2; exit 2; fi
}
