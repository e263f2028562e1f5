// Command render schedules a platform workflow's output to destinations and
// commits each destination's folder to its GitOps state store. See README.md.
//
// Signals are handled by internal/cli: each command says what SIGINT and
// SIGTERM mean for it.
package main

import (
	"context"
	"os"

	"github.com/render-dev/render/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.IO{Out: os.Stdout, Err: os.Stderr}))
}
