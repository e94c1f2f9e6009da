package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/controller"
	"berth.dev/berth/tools"
)

// A tool call over /v1 is a call with an id (CallIDHeader) that outlives
// the request that made it: it runs detached from the client, bounded by
// its run's life and Limits.CallWriteTimeout, so that a client cut off by
// a proxy's read timeout does not interrupt a long eval cell, and its
// retry (with the same IdempotencyKeyHeader) gets the first call's answer
// instead of running the tool again. Prefer: respond-async answers 202 at
// once; GET /v1/runs/{id}/calls/{call} polls, DELETE cancels.

// Headers of calls.
const (
	// CallIDHeader carries a call's id on every answer of a tool call
	// (sync, 202, a poll): GET /v1/runs/{id}/calls/{call} fetches it.
	CallIDHeader = "Berth-Call-Id"
	// CallStatusHeader carries the call's status (CallRunning, CallDone,
	// CallFailed, CallCancelled) on the same answers.
	CallStatusHeader = "Berth-Call-Status"
	// IdempotencyKeyHeader names a call: a POST of the same tenant, run,
	// tool and arguments with the same key is the same call.
	IdempotencyKeyHeader = "Idempotency-Key"
	// MaxIdempotencyKey caps the key's length.
	MaxIdempotencyKey = 255
)

// Retention and waits of calls.
const (
	// CallKeep is how long an ended call's answer is kept; then it is
	// forgotten (404 unknown_call), and a retry with its key runs anew.
	CallKeep = 15 * time.Minute
	// MaxKeptCalls caps one tenant's ended calls kept; past it the oldest
	// is forgotten first.
	MaxKeptCalls = 256
	// MaxCallWait caps ?wait= of GET /v1/runs/{id}/calls/{call}, and how
	// long DELETE waits for the cancelled call to end.
	MaxCallWait = 30 * time.Second
	// CallPollRetry is the Retry-After, in seconds, of a 202 answer about a
	// call still running: when to poll again (or poll with ?wait=).
	CallPollRetry = 1
	// TooManyRetry is the Retry-After, in seconds, of 429 too_many.
	TooManyRetry = 5
)

// Call statuses.
const (
	CallRunning   = "running"
	CallDone      = "done"   // the tool answered (a result with isError too)
	CallFailed    = "failed" // the call answered an error status
	CallCancelled = "cancelled"
)

// callStatus is the body of a 202 answer and of DELETE.
type callStatus struct {
	Call    string    `json:"call"`
	Run     string    `json:"run"`
	Tool    string    `json:"tool"`
	Status  string    `json:"status"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
}

// call is one tool call of a run. Its fields after done are written
// once, before done closes, under the store's lock.
type call struct {
	id, run, tenant, tool string
	key                   string
	digest                [sha256.Size]byte
	started               time.Time
	cancel                context.CancelFunc
	done                  chan struct{} // closed once the answer is set

	cancelAsked bool    // DELETE asked to cancel it (under the store's lock)
	status      string  // CallRunning until done
	ans         *answer // the answer the sync request would have written
	ended       time.Time
}

// answer is a recorded HTTP answer: what a synchronous call writes, kept
// to be written again to its retries and polls.
type answer struct {
	status int
	header http.Header
	body   bytes.Buffer
}

func (a *answer) Header() http.Header         { return a.header }
func (a *answer) WriteHeader(code int)        { a.status = code }
func (a *answer) Write(b []byte) (int, error) { return a.body.Write(b) }

// replay writes a to w, with the call's headers.
func (a *answer) replay(w http.ResponseWriter, c *call) {
	for k, v := range a.header {
		w.Header()[k] = v
	}
	setCallHeaders(w, c, c.status)
	w.WriteHeader(a.status)
	w.Write(a.body.Bytes())
}

func setCallHeaders(w http.ResponseWriter, c *call, status string) {
	w.Header().Set(CallIDHeader, c.id)
	w.Header().Set(CallStatusHeader, status)
}

func (c *call) location() string { return "/v1/runs/" + c.run + "/calls/" + c.id }

// idemKey scopes an idempotency key.
type idemKey struct{ tenant, run, tool, key string }

// callStore holds the calls running and the ended ones kept (CallKeep,
// MaxKeptCalls). Each call's goroutine is owned by the store: it ends
// when the call's Run.Call returns, which the run's close and the call's
// deadline bound.
type callStore struct {
	mu    sync.Mutex
	byID  map[string]*call
	byKey map[idemKey]*call
	ended []*call        // ended calls kept, in the order they ended
	kept  map[string]int // tenant → len of its ended calls kept
}

func newCallStore() *callStore {
	return &callStore{byID: map[string]*call{}, byKey: map[idemKey]*call{}, kept: map[string]int{}}
}

// errKeyReused is a key sent again with other arguments.
var errKeyReused = errors.New("idempotency key reused")

// sweepLocked forgets the ended calls past CallKeep or past their
// tenant's MaxKeptCalls, oldest first.
func (s *callStore) sweepLocked(now time.Time) {
	keep := s.ended[:0]
	for _, c := range s.ended {
		if now.Sub(c.ended) < CallKeep && s.kept[c.tenant] <= MaxKeptCalls {
			keep = append(keep, c)
			continue
		}
		delete(s.byID, c.id)
		if k := (idemKey{c.tenant, c.run, c.tool, c.key}); c.key != "" && s.byKey[k] == c {
			delete(s.byKey, k)
		}
		if s.kept[c.tenant]--; s.kept[c.tenant] <= 0 {
			delete(s.kept, c.tenant)
		}
	}
	clear(s.ended[len(keep):])
	s.ended = keep
}

// claim returns the call of key (existing) or registers c as a new call
// (with c's key, when it has one). A key of a call with other arguments
// is errKeyReused.
func (s *callStore) claim(c *call) (got *call, existing bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(time.Now())
	k := idemKey{c.tenant, c.run, c.tool, c.key}
	if c.key != "" {
		if old := s.byKey[k]; old != nil {
			if old.digest != c.digest {
				return old, true, errKeyReused
			}
			return old, true, nil
		}
		s.byKey[k] = c
	}
	s.byID[c.id] = c
	return c, false, nil
}

// finish records c's answer and wakes its waiters.
func (s *callStore) finish(c *call, a *answer, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case c.cancelAsked && err != nil:
		c.status = CallCancelled
		a = &answer{header: http.Header{}}
		writeError(a, http.StatusConflict, "call_cancelled", fmt.Sprintf(
			"httpapi: call %s (%s) was cancelled by DELETE before it ended: what it did until the interrupt stays done; call the tool again (with a new %s) to run it anew",
			c.id, c.tool, IdempotencyKeyHeader))
	case a.status < 300:
		c.status = CallDone
	default:
		c.status = CallFailed
	}
	// An answer that says "retry after Retry-After" (429, 503) lets go of
	// the key: the retry it asks for runs anew. The call stays found by id.
	if k := (idemKey{c.tenant, c.run, c.tool, c.key}); c.key != "" && retryable(a.status) && s.byKey[k] == c {
		delete(s.byKey, k)
	}
	c.ans, c.ended = a, time.Now()
	s.ended = append(s.ended, c)
	s.kept[c.tenant]++
	close(c.done)
	s.sweepLocked(c.ended)
}

// retryable reports whether an answer of status asks the client to retry
// (too_many, and the 503s that say so): its call is not what a retry
// with the same key should get again.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// get returns the call id of run, or nil when there is none (never was,
// another run's or tenant's, or forgotten).
func (s *callStore) get(run *controller.Run, id string) *call {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(time.Now())
	c := s.byID[id]
	if c == nil || c.run != run.ID() || c.tenant != run.Info().Tenant {
		return nil
	}
	return c
}

// state returns c's status and, once it ended, its answer.
func (s *callStore) state(c *call) (string, *answer, callStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.status, c.ans, callStatus{Call: c.id, Run: c.run, Tool: c.tool, Status: c.status, Started: c.started, Ended: c.ended}
}

// askCancel cancels c, unless it ended.
func (s *callStore) askCancel(c *call) {
	s.mu.Lock()
	running := c.status == CallRunning
	if running {
		c.cancelAsked = true
	}
	s.mu.Unlock()
	if running {
		c.cancel()
	}
}

// newCallID returns a fresh call id: 32 hex digits.
func newCallID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// argsDigest digests what makes two POSTs with one idempotency key the
// same call: the arguments (as JSON values: key order and whitespace do
// not count), the surface and the worker.
func argsDigest(req callRequest) ([sha256.Size]byte, error) {
	var v any
	args := req.Args
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return [sha256.Size]byte{}, err
	}
	canon, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q %q\n", req.Surface, req.Worker)
	h.Write(canon)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d, nil
}

// preferAsync reports whether r asks Prefer: respond-async (RFC 7240).
func preferAsync(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for _, p := range strings.Split(v, ",") {
			tok, _, _ := strings.Cut(p, ";")
			if strings.EqualFold(strings.TrimSpace(tok), "respond-async") {
				return true
			}
		}
	}
	return false
}

// startCall claims the request's call (an earlier one of its idempotency
// key, or a new one) and starts a new one in the background, detached
// from the request: the client may go, the call goes on.
func (s *server) startCall(r *http.Request, run *controller.Run, name string, surface tools.Surface, req callRequest, key string) (*call, bool, error) {
	c := &call{
		id: newCallID(), run: run.ID(), tenant: run.Info().Tenant, tool: name, key: key,
		started: time.Now(), status: CallRunning, done: make(chan struct{}),
	}
	if key != "" {
		d, err := argsDigest(req)
		if err != nil {
			return nil, false, &tools.InputError{Tool: name, Msg: "args are not JSON: " + err.Error(), Err: err}
		}
		c.digest = d
	}
	// The call's own bound: the deadline of a sync call's answer. The run's
	// close cancels it too (Run.Call). Set before the call can be found.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.limits.CallWriteTimeout)
	c.cancel = cancel
	got, existing, err := s.calls.claim(c)
	if err != nil || existing {
		cancel()
		return got, existing, err
	}
	// What s.fail logs of the request, not the request itself: the call
	// outlives its handler.
	logReq := &http.Request{Method: r.Method, URL: &url.URL{Path: r.URL.Path}}
	go func() {
		defer cancel()
		res, err := run.Call(ctx, surface, name, req.Args)
		a := &answer{header: http.Header{}}
		if err != nil {
			s.fail(a, logReq, err)
		} else {
			if res.Content == nil {
				res.Content = []tools.Content{}
			}
			writeJSON(a, http.StatusOK, res)
		}
		s.calls.finish(c, a, err)
	}()
	return c, false, nil
}

// writeAccepted answers 202 with c's status: it runs, poll its Location.
func (s *server) writeAccepted(w http.ResponseWriter, c *call, st callStatus) {
	setCallHeaders(w, c, st.Status)
	w.Header().Set("Location", c.location())
	if st.Status == CallRunning {
		w.Header().Set("Retry-After", strconv.Itoa(CallPollRetry))
	}
	writeJSON(w, http.StatusAccepted, st)
}

// lookupCall finds the {call} of the request's run, or answers 404
// unknown_call.
func (s *server) lookupCall(w http.ResponseWriter, r *http.Request) (*call, bool) {
	run, err := s.lookup(r)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	c := s.calls.get(run, r.PathValue("call"))
	if c == nil {
		writeError(w, http.StatusNotFound, "unknown_call", fmt.Sprintf(
			"httpapi: run %s has no call %s: a call is kept %s after it ends (at most the %d latest of a tenant), then forgotten; this one expired, or never was. Call the tool again to run it anew",
			run.ID(), r.PathValue("call"), CallKeep, MaxKeptCalls))
		return nil, false
	}
	return c, true
}

// wait waits for c to end, at most d and while r's client is there.
func wait(r *http.Request, c *call, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	case <-r.Context().Done():
	}
}

// getCall answers a call's status: 202 while it runs (after waiting up to
// ?wait=), then the answer the synchronous call would have had.
func (s *server) getCall(w http.ResponseWriter, r *http.Request) {
	c, ok := s.lookupCall(w, r)
	if !ok {
		return
	}
	var d time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		var err error
		if d, err = parseWait(v); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("httpapi: wait=%q is not a duration: send seconds (wait=20) or a Go duration (wait=20s), at most %s", v, MaxCallWait))
			return
		}
		d = min(d, MaxCallWait)
		// The long poll must outlast the short routes' write deadline.
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + s.limits.WriteTimeout))
	}
	wait(r, c, d)
	status, ans, st := s.calls.state(c)
	if status == CallRunning {
		s.writeAccepted(w, c, st)
		return
	}
	ans.replay(w, c)
}

func parseWait(v string) (time.Duration, error) {
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err == nil && d < 0 {
		err = errors.New("negative")
	}
	return d, err
}

// cancelCall cancels a call (a cell is interrupted) and answers its final
// status, once it ended (at most MaxCallWait: then 202, still running).
func (s *server) cancelCall(w http.ResponseWriter, r *http.Request) {
	c, ok := s.lookupCall(w, r)
	if !ok {
		return
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(MaxCallWait + s.limits.WriteTimeout))
	s.calls.askCancel(c)
	wait(r, c, MaxCallWait)
	status, _, st := s.calls.state(c)
	if status == CallRunning {
		s.writeAccepted(w, c, st)
		return
	}
	setCallHeaders(w, c, status)
	writeJSON(w, http.StatusOK, st)
}
