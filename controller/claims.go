package controller

import (
	"errors"
	"fmt"
	"sync"
)

// claims records which run holds a conversation-wide resource: one debug
// session per conversation (DBG-3), whichever of the conversation's runs
// launched it. Keys are scoped by tenant, so one tenant's conversation id
// never blocks another's.
type claims struct {
	mu     sync.Mutex
	holder map[claimKey]string // → run id
}

type claimKey struct{ tenant, conversation, kind string }

// ErrClaimed is wrapped by a refused [Env.Claim].
var ErrClaimed = errors.New("held by another run of the conversation")

// take gives k to run, or fails naming the run that holds it. The release
// it returns is idempotent and releases only run's own hold.
func (c *claims) take(k claimKey, run string) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holder == nil {
		c.holder = map[claimKey]string{}
	}
	if h, ok := c.holder[k]; ok && h != run {
		return nil, fmt.Errorf("conversation %q already has a %s session, in run %s (%w): use that run, or end the session there (debug terminate) or close that run first", k.conversation, k.kind, h, ErrClaimed)
	}
	c.holder[k] = run
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.holder[k] == run {
				delete(c.holder, k)
			}
		})
	}, nil
}

// releaseRun gives back everything run holds.
func (c *claims) releaseRun(run string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, h := range c.holder {
		if h == run {
			delete(c.holder, k)
		}
	}
}
