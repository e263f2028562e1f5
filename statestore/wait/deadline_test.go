package wait

import (
	"context"
	"testing"
	"time"
)

func TestEnsureRetryDeadlineKeepsTheRendersClock(t *testing.T) {
	ctx := WithRetryDeadline(context.Background(), time.Second)
	at, budget := RetryDeadline(ctx)
	at2, budget2 := RetryDeadline(EnsureRetryDeadline(ctx, time.Hour))
	if !at.Equal(at2) || budget != budget2 {
		t.Fatalf("EnsureRetryDeadline replaced the render's deadline: %v/%v -> %v/%v", at, budget, at2, budget2)
	}
	if _, b := RetryDeadline(EnsureRetryDeadline(context.Background(), time.Hour)); b != time.Hour {
		t.Fatalf("EnsureRetryDeadline without a deadline: budget %v, want 1h", b)
	}
}
