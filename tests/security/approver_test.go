package security

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// card is what a card.opened event carries that the tests look at.
type card struct {
	N        int    `json:"n"`
	Kind     string `json:"kind"`
	Tool     string `json:"tool"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
	TooLarge bool   `json:"too_large"`
}

// watcher holds a run's event stream open (so the run has someone to ask)
// and hands every opened card to the test.
type watcher struct {
	cards     chan card
	decisions chan map[string]any // permission.decided events
	cancel    context.CancelFunc
	done      chan struct{}
}

// watch follows run's event stream with tok until the test ends. It
// returns once the stream is connected, so a card drawn after it returns
// is not refused for want of a listener.
func (s *server) watch(t *testing.T, tok, run string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+"/v1/runs/"+run+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		t.Fatalf("events of run %s: %d", run, resp.StatusCode)
	}
	w := &watcher{cards: make(chan card, 64), decisions: make(chan map[string]any, 64), cancel: cancel, done: make(chan struct{})}
	connected := make(chan struct{})
	var once sync.Once
	go func() { // owned by w: ends when cancel closes the body
		defer close(w.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, ": connected") {
				once.Do(func() { close(connected) })
			}
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				event = e
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok && event == "permission.decided" {
				var m map[string]any
				if json.Unmarshal([]byte(d), &m) == nil {
					select {
					case w.decisions <- m:
					default:
					}
				}
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok && event == "card.opened" {
				var c card
				if json.Unmarshal([]byte(d), &c) == nil {
					select {
					case w.cards <- c:
					default:
					}
				}
			}
		}
		once.Do(func() { close(connected) })
	}()
	<-connected
	t.Cleanup(func() { w.cancel(); <-w.done })
	return w
}

// next returns the next card opened on the stream, failing the test when
// none comes within callTimeout.
func (w *watcher) next(t *testing.T) card {
	t.Helper()
	select {
	case c := <-w.cards:
		return c
	case <-w.done:
		t.Fatal("the event stream ended before a card was opened")
	}
	return card{}
}

// answer posts a permission decision for card n with tok.
func (s *server) answer(tok, run string, n int, decision string) (reply, error) {
	return s.request("POST", fmt.Sprintf("/v1/runs/%s/cards/%d", run, n), tok, `{"decision":"`+decision+`"}`)
}

// approveAll approves every permission card of run with the operator's
// token while the test runs, and records what each card showed.
func (s *server) approveAll(t *testing.T, opTok, run string) *[]card {
	t.Helper()
	w := s.watch(t, opTok, run)
	var mu sync.Mutex
	seen := &[]card{}
	go func() { // ends with the watcher's stream
		for {
			select {
			case c := <-w.cards:
				mu.Lock()
				*seen = append(*seen, c)
				mu.Unlock()
				if c.Kind == "permission" {
					s.answer(opTok, run, c.N, "approve")
				}
			case <-w.done:
				return
			}
		}
	}()
	return seen
}
