package discovery

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/kolla-agent/kolla-agent/retry"
)

// waitHTTP retries a GET until the endpoint answers with an expected status.
// go-retryablehttp drives the retries; our backoff sets their pace and its
// CheckRetry hook reports each attempt's outcome.
func (w *Waiter) waitHTTP(ctx context.Context, d Dependency, report func(Observation)) error {
	b := retry.Lookup()
	c := retryablehttp.NewClient()
	c.Logger = nil
	c.RetryMax = 1 << 30
	c.HTTPClient.Timeout = attemptTimeout
	c.HTTPClient.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if t, ok := c.HTTPClient.Transport.(*http.Transport); ok {
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		t.DisableKeepAlives = true // one probe per attempt; no idle connections left behind
	}
	c.Backoff = func(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return b.Step() }
	var last Observation
	c.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		last = httpObservation(d, resp, err)
		report(last)
		return last.State != Ready, nil
	}
	c.ErrorHandler = func(resp *http.Response, err error, _ int) (*http.Response, error) {
		if resp != nil {
			resp.Body.Close()
		}
		if err == nil {
			err = errors.New(last.Detail)
		}
		return nil, err
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, d.URL, nil)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrFailed, d, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	resp.Body.Close()
	return nil
}

func httpObservation(d Dependency, resp *http.Response, err error) Observation {
	if err != nil {
		var o Observation = dialObservation(err)
		return o
	}
	code := resp.StatusCode
	up := code >= 200 && code < 400
	if len(d.ExpectStatus) > 0 {
		up = slices.Contains(d.ExpectStatus, code)
	}
	if up {
		return ready("HTTP %s", resp.Status)
	}
	return waiting("HTTP %s", resp.Status)
}
