# Daemons started by hand and tracked by PID, for the test services'
# scripts (scripts/nova, scripts/swift): sourced, never run. There is no
# systemd as PID 1 on the machines they run on. The sourcing script sets
# $RUN (PID files), $LOGS (one log a daemon) and $SECRETS (test-only
# passwords) and defines log and die.

# running NAME: whether the daemon started as NAME is alive. A PID file whose
# process is gone or a zombie, or was reused by a process that is not the
# session leader we started, does not count.
running() {
	local f=$RUN/$1.pid pid
	[ -s "$f" ] || return 1
	pid=$(cat "$f")
	local st sid
	read -r st sid < <(ps -o stat=,sid= -p "$pid") || return 1
	# A zombie (killed, not yet reaped by PID 1) is not running.
	[[ $st != Z* ]] && [ "$sid" = "$pid" ]
}

# spawn NAME CMD...: start CMD as its own session (so stop.sh can signal the
# daemon and any children it forks as one group), output to $LOGS/NAME.log,
# PID recorded in $RUN/NAME.pid. Does nothing when NAME is already running.
spawn() {
	local name=$1
	shift
	if running "$name"; then
		return 0
	fi
	mkdir -p "$LOGS" "$RUN"
	# Keep the previous run's log for a post-mortem; readiness checks grep
	# this run's only.
	[ -f "$LOGS/$name.log" ] && mv -f "$LOGS/$name.log" "$LOGS/$name.log.1"
	setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
	local pid=$!
	echo "$pid" >"$RUN/$name.pid"
	# Until the forked shell has exec'd setsid, the process is not yet its
	# own session leader and `running` would call it gone: on a loaded
	# machine wait_up then gave up on a daemon that was starting fine.
	local i st sid
	for ((i = 0; i < 100; i++)); do
		read -r st sid < <(ps -o stat=,sid= -p "$pid") || break
		[ "$sid" = "$pid" ] && break
		sleep 0.05
	done
}

# wait_up NAME SECONDS CMD...: wait_for, for daemon NAME: fails at once
# when NAME dies while waited for, and shows the end of its log either way
# (CI shows only what the scripts print).
wait_up() {
	local name=$1 secs=$2
	local deadline=$((SECONDS + secs)) why=
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ! running "$name"; then
			why="$name exited"
		elif [ "$SECONDS" -ge "$deadline" ]; then
			why="timed out after ${secs}s waiting for $name"
		fi
		if [ -n "$why" ]; then
			tail -n 25 "$LOGS/$name.log" >&2 || true
			die "$why (log above, all of it in $LOGS/$name.log)"
		fi
		sleep 0.3
	done
}

# stop_daemons SECONDS NAME...: SIGTERM to each running daemon's session
# (its own process group), in the order given, then SIGKILL to any group
# still alive after SECONDS; removes their PID files. Touches no other
# process.
stop_daemons() {
	local secs=$1 name pid i
	shift
	local pids=() left=()
	for name in "$@"; do
		if running "$name"; then
			pid=$(cat "$RUN/$name.pid")
			kill -TERM -- "-$pid" 2>/dev/null || true
			pids+=("$pid")
			log "stopping $name (pid $pid)"
		fi
		rm -f "$RUN/$name.pid"
	done
	for ((i = 0; i < secs * 10; i++)); do
		left=()
		for pid in ${pids[@]+"${pids[@]}"}; do
			# Any process still in the daemon's process group.
			if pgrep -g "$pid" >/dev/null 2>&1; then left+=("$pid"); fi
		done
		[ ${#left[@]} -eq 0 ] && break
		sleep 0.1
	done
	for pid in ${left[@]+"${left[@]}"}; do
		log "process group $pid did not stop in ${secs}s: SIGKILL"
		kill -KILL -- "-$pid" 2>/dev/null || true
	done
}

# secret NAME: a random test-only password or key, generated once and kept in
# $SECRETS (mode 600). Never echoed to logs.
secret() {
	local f=$SECRETS/$1
	if [ ! -s "$f" ]; then
		mkdir -p "$SECRETS" && chmod 700 "$SECRETS"
		(umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$f")
	fi
	cat "$f"
}

# daemon_status NAME...: prints each daemon: up or DOWN, its PID and the
# resident memory of its whole session (the daemon and its children), then
# the total; returns 1 when any is down.
daemon_status() {
	local name pid kb total=0 down=0 w=0
	for name in "$@"; do
		[ ${#name} -gt $w ] && w=${#name}
	done
	w=$((w + 2))
	for name in "$@"; do
		if running "$name"; then
			pid=$(cat "$RUN/$name.pid")
			kb=$(ps -o rss= -s "$pid" | awk '{s += $1} END {print s + 0}')
			total=$((total + kb))
			printf '%-*s up    pid %-7s %6d MiB\n' "$w" "$name" "$pid" $((kb / 1024))
		else
			printf '%-*s DOWN\n' "$w" "$name"
			down=1
		fi
	done
	printf '%-*s %25d MiB\n' "$w" total $((total / 1024))
	return $down
}
