package s3store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/wait"
)

var (
	// errChanged means an object changed between the listing and a read
	// or a conditional write: another writer got there first.
	errChanged = fmt.Errorf("%w: the bucket changed underneath", statestore.ErrConflict)
	// errNoBucket means the bucket does not exist.
	errNoBucket = fmt.Errorf("%w", statestore.ErrNotFound)
	// errNoKey means an object does not exist.
	errNoKey = fmt.Errorf("object: %w", statestore.ErrNotFound)
)

func newTLSConfig() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }

// retry runs op while the server cannot be reached, as
// wait.Unreachable(retryLimit) waits. Errors are translated to the
// statestore sentinels here, at the boundary.
func (s *Store) retry(ctx context.Context, op func() error) error {
	return wait.Unreachable(retryLimit).Retry(ctx, func() error { return s.translate(op()) })
}

var authCodes = map[string]bool{
	"AccessDenied":                true,
	"InvalidAccessKeyId":          true,
	"SignatureDoesNotMatch":       true,
	"InvalidToken":                true,
	"ExpiredToken":                true,
	"TokenRefreshRequired":        true,
	"AccountProblem":              true,
	"AllAccessDisabled":           true,
	"InvalidSecurity":             true,
	"XMinioInvalidIAMCredentials": true,
}

var transientCodes = map[string]bool{
	"SlowDown":                   true,
	"ServiceUnavailable":         true,
	"InternalError":              true,
	"RequestTimeout":             true,
	"RequestTimeTooSkewed":       false,
	"XMinioServerNotInitialized": true,
	"XMinioStorageFull":          false,
	"XMinioReadQuorum":           true,
	"XMinioWriteQuorum":          true,
}

// translate maps a minio-go or transport error to the statestore
// sentinels, with any credential removed from its text.
func (s *Store) translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errChanged), errors.Is(err, statestore.ErrNotFound),
		errors.Is(err, statestore.ErrAuth), errors.Is(err, statestore.ErrUnreachable),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	resp := minio.ToErrorResponse(err)
	code := resp.Code
	switch {
	case code == "PreconditionFailed" || code == "ConditionalRequestConflict" ||
		resp.StatusCode == http.StatusPreconditionFailed || resp.StatusCode == http.StatusConflict && code == "OperationAborted":
		return errChanged
	case code == "NoSuchBucket":
		return fmt.Errorf("bucket %q does not exist at %s: %w", s.cfg.Bucket, s.cfg.Endpoint, errNoBucket)
	case code == "NoSuchKey":
		return errNoKey
	case authCodes[code] || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%w: %s refused the credentials for bucket %q: %s", statestore.ErrAuth, s.cfg.Endpoint, s.cfg.Bucket, s.redact(describe(resp)))
	case transientCodes[code] || resp.StatusCode >= 500:
		return fmt.Errorf("%w: %s: %s", statestore.ErrUnreachable, s.cfg.Endpoint, s.redact(describe(resp)))
	case code != "":
		return fmt.Errorf("%s", s.redact(describe(resp)))
	}
	n := driver.Network{Server: s.cfg.Endpoint, Field: "endpoint", Redact: s.redact}
	if out, ok := driver.TranslateNetwork(err, n); ok {
		return out
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error() // without the request URL
	}
	return statestore.Redacted(s.redact(msg), err)
}

func describe(resp minio.ErrorResponse) string {
	msg := resp.Code
	if resp.Message != "" {
		msg += ": " + resp.Message
	}
	if resp.StatusCode != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", resp.StatusCode)
	}
	return msg
}

// redact removes the configured credentials from s.
func (s *Store) redact(msg string) string {
	for _, secret := range []string{s.cfg.SecretAccessKey, s.cfg.AccessKeyID} {
		if len(secret) >= 4 {
			msg = strings.ReplaceAll(msg, secret, "***")
		}
	}
	return msg
}
