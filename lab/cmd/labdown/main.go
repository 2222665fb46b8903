// Command labdown stops whatever a lab left running (`make lab-down`): its
// containers (by the hypervisor's PID files), the Consul servers, the
// lab's Nova and Swift, and the bridge with its nftables tables. It keeps the image
// cache. It needs root; nothing running is no error.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jiocloud/orchestrate/lab/consullab"
	"github.com/jiocloud/orchestrate/lab/hypervisor"
	"github.com/jiocloud/orchestrate/lab/internal/labenv"
	"github.com/jiocloud/orchestrate/lab/netlab"
	"github.com/jiocloud/orchestrate/lab/novalab"
	"github.com/jiocloud/orchestrate/lab/swiftlab"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "labdown: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := labenv.Dir()
	if err != nil {
		return err
	}
	root, err := labenv.RepoRoot()
	if err != nil {
		return err
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var errs []error
	// The containers powered off and their roots unmounted and removed:
	// the last run's journals are gone after this (read them before).
	if err := hypervisor.Remove(filepath.Join(dir, "machines"), 30*time.Second, log); err != nil {
		errs = append(errs, fmt.Errorf("containers: %w", err))
	}
	if err := consullab.StopDir(ctx, filepath.Join(dir, "consul")); err != nil {
		errs = append(errs, fmt.Errorf("consul servers: %w", err))
	}
	if err := novalab.Stop(ctx, novalab.Options{Dir: filepath.Join(dir, "nova"), Scripts: filepath.Join(root, "scripts/nova")}); err != nil {
		errs = append(errs, fmt.Errorf("nova: %w", err))
	}
	if err := swiftlab.Stop(ctx, swiftlab.Options{Dir: filepath.Join(dir, "swift"), Scripts: filepath.Join(root, "scripts/swift")}); err != nil {
		errs = append(errs, fmt.Errorf("swift: %w", err))
	}
	if err := netlab.Clean(ctx, netlab.Default()); err != nil {
		errs = append(errs, fmt.Errorf("network: %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	fmt.Println("lab down: containers stopped and removed, Consul servers, Nova, Swift and the bridge stopped; the image cache is kept in", dir)
	return nil
}
