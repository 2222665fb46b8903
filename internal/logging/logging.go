// Package logging configures log/slog once per binary from --log-level and
// --log-format.
package logging

import (
	"fmt"
	"github.com/jiocloud/orchestrate/internal/cli"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
)

// Options are the logging flags shared by every binary.
type Options struct {
	Level  string
	Format string
}

// AddFlags registers --log-level and --log-format on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.Format, "log-format", "text", "log format: text or json")
	cli.SetValues(fs, "log-level", "debug", "info", "warn", "error")
	cli.SetValues(fs, "log-format", "text", "json")
}

// New returns a logger writing to w, or a usage error naming the bad flag.
func (o Options) New(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.Level)); err != nil {
		return nil, exitcode.Usagef("--log-level %q: want debug, info, warn or error", o.Level)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(o.Format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	default:
		return nil, exitcode.Wrap(exitcode.Usage, fmt.Errorf("--log-format %q: want text or json", o.Format))
	}
}
