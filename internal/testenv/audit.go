package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

// AuditRequest is one API request from the audit log.
type AuditRequest struct {
	ID         string    // audit ID: one per request
	User       string    // authenticated user name
	Verb       string    // get, list, watch, create, ... (lower-case API verb)
	RequestURI string    // path and query, e.g. /api/v1/namespaces/x/pods?watch=true
	Time       time.Time // when the API server received the request
	Code       int       // response status code, once logged
	Complete   bool      // the response has ended: a watch, closed
}

// auditEvent holds the fields of an audit.k8s.io/v1 Event that Requests
// reads; the full type lives in k8s.io/apiserver, too big a dependency for this.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// Requests returns the API requests user made that the API server received
// at or after since, oldest first. Each request is logged at several stages
// (a watch at ResponseStarted and again at ResponseComplete); it is counted
// once, by audit ID. An event can reach the log a moment after the client has
// its response: poll for an expected count with a deadline.
func (e *Env) Requests(user string, since time.Time) ([]AuditRequest, error) {
	f, err := os.Open(e.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	defer f.Close()
	byID := map[string]*AuditRequest{}
	r := bufio.NewReaderSize(f, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // a last line without newline is still being written
		}
		if err != nil {
			return nil, fmt.Errorf("testenv: %s: %w", e.AuditLog, err)
		}
		// An API server killed mid-write (tests kill it) leaves its last
		// event cut off, and the next one is appended to it on the same
		// line: the cut event is lost, the one after it is read.
		if i := bytes.LastIndex(line, []byte(`{"kind":"Event"`)); i > 0 {
			line = line[i:]
		}
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("testenv: %s:%d: %w", e.AuditLog, lineNo, err)
		}
		if ev.User.Username != user || ev.RequestReceivedTimestamp.Before(since) {
			continue
		}
		req := byID[ev.AuditID]
		if req == nil {
			req = &AuditRequest{ID: ev.AuditID, User: ev.User.Username, Verb: ev.Verb, RequestURI: ev.RequestURI, Time: ev.RequestReceivedTimestamp}
			byID[ev.AuditID] = req
		}
		if ev.ResponseStatus != nil {
			req.Code = ev.ResponseStatus.Code
		}
		if ev.Stage == "ResponseComplete" || ev.Stage == "Panic" {
			req.Complete = true
		}
	}
	out := make([]AuditRequest, 0, len(byID))
	for _, req := range byID {
		out = append(out, *req)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}
