#!/bin/sh
# Stands in for one host's consistent Puppet run in rollout tests; $1 is
# the host. It appends "start <host> <version> <unix time>" and, when it
# ends, "end ..." to $STEP_DIR/events; writes its own PID and its parent's
# (the converge that runs it) to $STEP_DIR/<host>.pids; sleeps
# $STEP_DIR/<host>.sleep seconds (else $STEP_DIR/sleep, else 0.2); exits 1
# when $STEP_DIR/<host>.fail exists, else 2 (Puppet: changes applied).
h=$1
d=$STEP_DIR
# The PIDs first, whole (written aside, then renamed): a test reads them
# as soon as the start line appears.
echo "$$ $PPID" > "$d/$h.pids.tmp" && mv "$d/$h.pids.tmp" "$d/$h.pids"
echo "start $h $ORCHESTRATE_VERSION $(date +%s.%N)" >> "$d/events"
s=0.2
[ -f "$d/sleep" ] && s=$(cat "$d/sleep")
[ -f "$d/$h.sleep" ] && s=$(cat "$d/$h.sleep")
sleep "$s"
echo "end $h $ORCHESTRATE_VERSION $(date +%s.%N)" >> "$d/events"
[ -f "$d/$h.fail" ] && exit 1
exit 2
