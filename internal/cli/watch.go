package cli

import (
	"context"
	"errors"
	"log/slog"
)

// runWatch is watch mode; see issue 5.
func runWatch(ctx context.Context, o *renderOptions, io IO, log *slog.Logger) error {
	return &ExitError{Code: ExitBadInput, Err: errors.New("--watch is not available yet")}
}
