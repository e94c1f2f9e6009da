package lsp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Prewarm: a run may ask for its language servers as it opens, so that its
// first lsp call finds the server up (or further into its start) instead
// of paying all of the start itself. A prewarmed server is an ordinary one
// once started: the idle timeout stops it unused, the run's close stops it.

// LanguageExt returns the file extension the servers of the table handle
// for the language lang (an LSP language id such as "go", "python",
// "typescript", or an extension without its dot, "rs"), the shortest when
// there are several (".js" of ".js", ".mjs", ".cjs"), and false when no
// server handles it.
func LanguageExt(servers []Server, lang string) (string, bool) {
	lang = strings.ToLower(strings.TrimSpace(lang))
	var exts []string
	for _, sv := range servers {
		for ext, id := range sv.Languages {
			if lang != "" && (id == lang || ext == "."+lang) && !slices.Contains(exts, ext) {
				exts = append(exts, ext)
			}
		}
	}
	if len(exts) == 0 {
		return "", false
	}
	slices.SortFunc(exts, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	return exts[0], true
}

// Languages lists the language ids the servers of the table handle,
// sorted, for messages.
func Languages(servers []Server) []string {
	var out []string
	for _, sv := range servers {
		for _, id := range sv.Languages {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Prewarm starts, in the background, the language server of each of langs
// (see LanguageExt) for the workspace root, each once approve lets it (the
// run's permission gate deciding a call of lsp, which a server's start is),
// without waiting for it to be ready. A server that could not be started
// leaves a note for the next lsp result, whose call then starts it as
// usual. Close stops what is still being started. Prewarm runs once per
// supervisor; a second call does nothing.
func (s *Supervisor) Prewarm(langs []string, approve func(ctx context.Context, lang string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.prewarmStop != nil || len(langs) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	s.prewarmStop = cancel
	for _, lang := range langs {
		s.prewarms.Add(1)
		go func() { // ends with the start's first step, which Close cancels
			defer s.prewarms.Done()
			err := s.prewarm(ctx, lang, approve)
			if err == nil || ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.closed {
				s.prewarmNotes = append(s.prewarmNotes, fmt.Sprintf("note: the %s language server asked for when the run opened (prewarm) was not started: %s; lsp status shows what was found, and a call about a %s file starts one once it can run", lang, prewarmWhy(err), lang))
			}
		}()
	}
}

// prewarm starts lang's server for the workspace root once approved.
func (s *Supervisor) prewarm(ctx context.Context, lang string, approve func(ctx context.Context, lang string) error) error {
	ext, ok := LanguageExt(s.opts.Servers, lang)
	if !ok {
		return fmt.Errorf("no server of the table handles %s (the servers are %s)", lang, s.serverIDs())
	}
	if err := approve(ctx, lang); err != nil {
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "permission: "))
	}
	// A file of the language at the root stands for the project there:
	// the root's markers decide which server, as for any file.
	_, err := s.serverFor(ctx, "berth-prewarm"+ext, 0)
	if err == nil || errors.Is(err, errStarting) {
		return nil
	}
	return err
}

// prewarmWhy is why a prewarm failed, without the advice written for a
// call about a file (the prewarm named none).
func prewarmWhy(err error) string {
	var ns *noServerError
	if errors.As(err, &ns) {
		return ns.why
	}
	return strings.TrimPrefix(err.Error(), "lsp: ")
}

// stopPrewarm cancels the prewarms still running and waits for them.
func (s *Supervisor) stopPrewarm() {
	s.mu.Lock()
	stop := s.prewarmStop
	s.mu.Unlock()
	if stop != nil {
		stop()
		s.prewarms.Wait()
	}
}

// takePrewarmNotesLocked returns and forgets the prewarm notes; s.mu is
// held.
func (s *Supervisor) takePrewarmNotesLocked() []string {
	n := s.prewarmNotes
	s.prewarmNotes = nil
	return n
}
