# Shell helpers shared by start.sh and stop.sh (sourced, not run).

pid_alive() {  # pid_alive PID NAME -> true if PID is a live (non-zombie) NAME
    local pid=${1:-} name=$2 stat rest
    [ -n "$pid" ] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    rest=${stat##*) }                       # fields after "(comm) "
    case "${rest%% *}" in Z|X|x) return 1 ;; esac   # zombie/dead: exited
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]
}
