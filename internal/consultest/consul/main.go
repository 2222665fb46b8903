// Command consul is the real HashiCorp Consul CLI, built from the Go module
// proxy so orchestrate's tests run against a real agent rather than a mock.
// It mirrors the upstream main package: every registered command, same UI.
package main

import (
	"fmt"
	"io"
	"log"
	"os"

	mcli "github.com/mitchellh/cli"

	"github.com/hashicorp/consul/command"
	"github.com/hashicorp/consul/command/cli"
	"github.com/hashicorp/consul/command/version"
)

func main() {
	os.Exit(run())
}

func run() int {
	log.SetOutput(io.Discard)
	ui := &cli.BasicUI{BasicUi: mcli.BasicUi{Writer: os.Stdout, ErrorWriter: os.Stderr}}
	cmds := command.RegisteredCommands(ui)
	names := make([]string, 0, len(cmds))
	for c := range cmds {
		names = append(names, c)
	}
	c := &mcli.CLI{
		Args:        os.Args[1:],
		Commands:    cmds,
		Name:        "consul",
		HelpFunc:    mcli.FilteredHelpFunc(names, mcli.BasicHelpFunc("consul")),
		HelpWriter:  os.Stdout,
		ErrorWriter: os.Stderr,
	}
	if c.IsVersion() {
		return version.New(ui).Run(nil)
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error executing CLI: %v\n", err)
		return 1
	}
	return code
}
