# Argument helpers shared by the cluster scripts (sourced, not run): optional positional arguments
# up to a "--" and integer checks that exit 2 with the argument's name.
# take_positionals NAME... -- ARGS...: assigns ARGS in order to the NAMEs until ARGS run out or reach
# a "--"; what follows that "--" (or the unassigned ARGS) is left in the array REST.
take_positionals() {
  local _tp_names=() _tp_n  # prefixed so that printf -v never sets these instead of a caller variable
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do _tp_names+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  for _tp_n in "${_tp_names[@]}"; do
    if [ $# -gt 0 ] && [ "$1" != "--" ]; then printf -v "$_tp_n" '%s' "$1"; shift; fi
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
