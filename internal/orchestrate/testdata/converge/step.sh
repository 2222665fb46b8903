#!/bin/sh
# Stands in for the update step, Puppet or a validation check in converge
# tests. $1 names the step. It records that it ran (and for which version) in
# $STEP_DIR/ran, sleeps $STEP_DIR/<step>.sleep seconds if that file exists,
# and exits with the code in $STEP_DIR/<step>.exit (default 0).
step=$1
echo "$step $ORCHESTRATE_VERSION" >> "$STEP_DIR/ran"
echo "$step: output for the run log"
if [ -f "$STEP_DIR/$step.sleep" ]; then
	sleep "$(cat "$STEP_DIR/$step.sleep")"
fi
if [ -f "$STEP_DIR/$step.exit" ]; then
	exit "$(cat "$STEP_DIR/$step.exit")"
fi
exit 0
