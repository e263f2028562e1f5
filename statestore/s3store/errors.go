package s3store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/statestore"
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

// retry runs op until it succeeds, fails for a reason retrying cannot fix,
// or the store's RetryDeadline passes. Errors are translated to the
// statestore sentinels here, at the boundary.
func (s *Store) retry(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(s.cfg.RetryDeadline)
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		err = s.translate(err)
		if !errors.Is(err, statestore.ErrUnreachable) || ctx.Err() != nil {
			return err
		}
		wait := backoff(attempt + 3)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (gave up after %s)", err, s.cfg.RetryDeadline)
		}
		if serr := sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w: %v", err, serr)
		}
	}
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

var unreachable = regexp.MustCompile(`(?i)connection refused|no such host|i/o timeout|connection reset|network is unreachable|broken pipe|EOF|timeout|server misbehaving|no route to host`)

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
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error() // without the request URL
	}
	msg = s.redact(msg)
	if strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:") || strings.Contains(msg, "certificate") {
		return fmt.Errorf("TLS with %s: %s", s.cfg.Endpoint, msg)
	}
	if isNetErr(err) || unreachable.MatchString(msg) {
		return fmt.Errorf("%w: %s: %s", statestore.ErrUnreachable, s.cfg.Endpoint, msg)
	}
	return errors.New(msg)
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
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
