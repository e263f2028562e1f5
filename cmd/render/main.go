// Command render schedules a platform workflow's output to destinations and
// commits each destination's folder to its GitOps state store. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/render-dev/render/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.IO{Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
