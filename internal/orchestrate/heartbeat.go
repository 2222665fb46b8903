package orchestrate

import (
	"context"
)

// cmdHeartbeat answers the reaper's heartbeat: the host's own heartbeat
// record, one write. Its watch (watch-config, on the reaper's
// <prefix>/reaper/heartbeat) runs it each time the leader rings, so the
// records of a healthy idle host move and the reaper does not count it
// silent (reaper/README.md, "Silent hosts").
var cmdHeartbeat = &command{
	name: "heartbeat", minArgs: 0, maxArgs: 0, needsHost: true, handler: true,
	summary: "Write this host's heartbeat record (run by its watch on the reaper's heartbeat).",
	run: func(ctx context.Context, e *env, _ []string) error {
		if err := e.store.Heartbeat(ctx, e.host); err != nil {
			return err
		}
		e.log.Debug("heartbeat written", "host", e.host)
		return nil
	},
}
