// Command composecheck loads a Compose project the way `docker compose config` does, with
// compose-go (the loader inside Docker Compose): the .env file, interpolation, the
// Compose Specification schema, normalization and every service's resolved environment.
// It needs no Docker engine.
//
// Usage: composecheck [-profile NAME]... DIR
//
// It prints the resolved project as JSON, or the loader's error and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

type profiles []string

func (p *profiles) String() string     { return strings.Join(*p, ",") }
func (p *profiles) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	var active profiles
	flag.Var(&active, "profile", "enable a profile (repeatable)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: composecheck [-profile NAME]... DIR")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), active); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(dir string, active []string) error {
	opts, err := cli.NewProjectOptions(
		[]string{filepath.Join(dir, "docker-compose.yml")},
		cli.WithWorkingDirectory(dir),
		cli.WithOsEnv,
		cli.WithEnvFiles(),
		cli.WithDotEnv,
		cli.WithProfiles(active),
	)
	if err != nil {
		return err
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		return err
	}
	project, err = project.WithServicesEnvironmentResolved(true)
	if err != nil {
		return err
	}
	out, err := project.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}
