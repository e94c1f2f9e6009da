package eval

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"berth.dev/berth/tools"
)

// Prewarm: a run may ask for its kernels as it opens, so that its first
// eval finds the kernel up instead of paying its cold start. A prewarmed
// kernel is an ordinary one once up (the idle budget, the run's close and
// berth's restarts treat it like any other); until then the first eval
// of its language waits for it rather than starting a second.

// ParseLanguage returns the kernel language a name stands for ("py",
// "python3", "node", …), as eval's language argument takes it.
func ParseLanguage(name string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "", "py", "python", "python3":
		return Python, nil
	case "js", "javascript", "node":
		return JavaScript, nil
	}
	return "", fmt.Errorf("unknown language %q: use python or javascript", name)
}

// Prewarm starts the kernels of langs (ParseLanguage names) in the
// background, each once approve lets it — the run's permission gate
// deciding a call of eval, which a kernel's start is — so that the first
// eval of each finds its kernel up. A kernel that could not be prewarmed
// leaves a note for the first eval of its language, which then starts it
// as usual. Close and Detach stop what is still starting.
func (s *Supervisor) Prewarm(langs []string, approve func(ctx context.Context, lang string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range langs {
		lang, err := ParseLanguage(name)
		if err != nil || s.closed || s.kernels[lang] != nil || s.starting[lang] != nil {
			continue
		}
		done := make(chan struct{})
		s.starting[lang] = done
		s.wg.Add(1)
		go func() { // ends with the start, which Close and Detach cancel
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.starting, lang)
				s.mu.Unlock()
				close(done)
			}()
			s.prewarm(lang, approve)
		}()
	}
}

// prewarm starts lang's kernel once approved, and keeps it for the first
// eval; a failure is a note for that eval.
func (s *Supervisor) prewarm(lang string, approve func(ctx context.Context, lang string) error) {
	ctx := s.bg
	fail := func(why string) {
		s.mu.Lock()
		if !s.closed {
			s.notes[lang] = append(s.notes[lang], fmt.Sprintf("the %s kernel asked for when the run opened (prewarm) was not started: %s; this call started it", lang, why))
		}
		s.mu.Unlock()
	}
	if err := approve(ctx, lang); err != nil {
		fail(strings.TrimPrefix(err.Error(), "permission: "))
		return
	}
	// ctx carries no call's permission gate: a start that is an exec step
	// of its own (a workspace venv's startup code, on the host) is refused
	// here, and the first eval asks for it on its own card.
	k, err := s.start(ctx, lang)
	switch {
	case err != nil && errors.Is(err, tools.ErrStepRefused):
		s.mu.Lock()
		if !s.closed {
			s.notes[lang] = append(s.notes[lang], fmt.Sprintf("the %s kernel asked for when the run opened (prewarm) was not started: its start runs the workspace's code, which prewarm never does; this call asked for it as a step of its own", lang))
		}
		s.mu.Unlock()
		return
	case err != nil:
		if ctx.Err() == nil {
			fail(strings.TrimPrefix(err.Error(), "eval: "))
		}
		return
	}
	s.mu.Lock()
	if s.closed || s.kernels[lang] != nil {
		s.mu.Unlock()
		k.stop(context.Background())
		return
	}
	s.kernels[lang] = k
	s.notes[lang] = append(s.notes[lang], k.notes...)
	s.gen++
	s.mu.Unlock()
}
