package eval

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/kernel"
	"berth.dev/berth/kernel/bundled"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
)

// Input is the eval tool's arguments.
type Input struct {
	Code        string `json:"code" jsonschema:"the cell: Python (default) or JavaScript; the last expression is echoed"`
	Description string `json:"description" jsonschema:"5 to 10 words saying what the cell does, for the transcript"`
	Language    string `json:"language,omitempty" jsonschema:"python (default) or javascript"`
	Reset       bool   `json:"reset,omitempty" jsonschema:"restart the kernel clean before running the cell"`
	Reload      bool   `json:"reload,omitempty" jsonschema:"reload the workspace modules that changed on disk since the kernel imported them, before the cell runs"`
}

const description = `Run code in a persistent kernel in the sandbox; variables, imports and loaded data survive between calls.
Python (default) or JavaScript (language "javascript"). The last expression is shown like in a notebook; display(x) shows rich output; a pandas DataFrame comes back as a table, a matplotlib figure as an image.
IPython idioms work in Python: %pip install, %cd, !cmd, x = !cmd, %%bash, %%timeit (and !cmd in JavaScript).
tool(name, args) calls this run's tools from the cell (Python: tool("read", {"path": "a.py"}); JavaScript: await tool(...)).
A cell silent for 5 minutes is interrupted. description (5-10 words) is required; reset restarts the kernel clean.
A result names the workspace modules that changed on disk after the kernel imported them (the cell ran their old code) with the reload call; reload: true reloads them before the cell runs.`

// minWords and maxWords bound the description.
const minWords, maxWords = 5, 10

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07`)

func (s *Supervisor) call(ctx context.Context, in Input) (*tools.Result, error) {
	if n := len(strings.Fields(in.Description)); n < minWords || n > maxWords {
		return tools.Errorf("description must be %d to %d words saying what the cell does (got %d), e.g. \"load the CSV and count rows per day\"", minWords, maxWords, n), nil
	}
	lang, err := ParseLanguage(in.Language)
	if err != nil {
		return tools.Errorf("%v", err), nil
	}
	code := in.Code
	if lang == Python {
		if code, err = rewritePython(code); err != nil {
			return nil, err
		}
	} else {
		code = rewriteJavaScript(code)
	}
	k, notes, err := s.kernelFor(ctx, lang, in.Reset)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		res := tools.Errorf("%s", strings.TrimPrefix(err.Error(), "eval: "))
		prependNotes(res, notes)
		return res, nil
	}
	// With reload, changed modules are reloaded before the cell; without,
	// the kernel is asked after the cell, so that a cell that reloads a
	// module itself is not told it ran the old code.
	var staleNotes []string
	var stale *staleReport
	if in.Reload || strings.TrimSpace(in.Code) == "" {
		staleNotes, stale = s.staleCheck(ctx, k, in.Reload)
	}
	if strings.TrimSpace(in.Code) == "" {
		res := tools.Textf("the %s kernel (%s) is ready", lang, k.kind)
		prependNotes(res, append(notes, staleNotes...))
		stale.annotate(res)
		return res, nil
	}
	res, err := s.run(ctx, k, code)
	if errors.Is(err, errNotTaken) {
		// The kernel's client gave up before the kernel took the cell: a
		// kernel that still runs is reattached and runs it with its state;
		// otherwise the cell runs once on a new kernel, saying that the
		// old one's state is gone.
		why := k.dead()
		if why == "" {
			why = "it stopped answering"
		}
		nk, note, rerr := s.revive(ctx, k, why)
		if rerr != nil {
			res := tools.Errorf("%s", strings.TrimPrefix(rerr.Error(), "eval: "))
			prependNotes(res, notes)
			return res, nil
		}
		if nk == nil {
			staleNotes, stale = nil, nil // the new kernel loads the files as they are now
			note = fmt.Sprintf("the %s kernel had died before it took the cell (%s), so the cell ran on a new kernel: all earlier state (variables, imports, loaded data) was lost; run the setup cells again", lang, why)
		}
		notes = append(notes, note)
		var more []string
		k, more, err = s.kernelFor(ctx, lang, false)
		notes = append(notes, more...)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			res := tools.Errorf("%s", strings.TrimPrefix(err.Error(), "eval: "))
			prependNotes(res, notes)
			return res, nil
		}
		res, err = s.run(ctx, k, code)
		if errors.Is(err, errNotTaken) {
			res, err = tools.Errorf("the %s kernel died too before it took the cell (%s); check the sandbox (memory, processes) before calling again", lang, k.dead()), nil
		}
	}
	if err != nil {
		return nil, err
	}
	if !in.Reload && k.dead() == "" {
		staleNotes, stale = s.staleCheck(ctx, k, false)
	}
	prependNotes(res, append(notes, staleNotes...))
	stale.annotate(res)
	return res, nil
}

// errNotTaken is run's word that the kernel never took the cell
// (kernel.ErrNotTaken): it may be run again on a new kernel.
var errNotTaken = errors.New("eval: the kernel never took the cell")

func prependNotes(res *tools.Result, notes []string) {
	if len(notes) == 0 {
		return
	}
	res.Content = append([]tools.Content{{Type: "text", Text: "note: " + strings.Join(notes, "; note: ")}}, res.Content...)
}

// output collects a cell's events into a result.
type output struct {
	mu      sync.Mutex
	text    strings.Builder
	cut     int   // bytes dropped from the middle
	shrunk  int64 // bytes the kernel client cut while receiving (kernel.Event.Dropped)
	tail    []string
	images  []tools.Content
	dropped int // images left out
	rich    []map[string]any
	last    string // the execute_result's text/plain
	errText string
}

// add appends text, keeping the head and a rolling tail within
// MaxOutputChars.
func (o *output) add(s string) {
	half := MaxOutputChars / 2
	if o.text.Len() < half {
		room := half - o.text.Len()
		if len(s) <= room {
			o.text.WriteString(s)
			return
		}
		o.text.WriteString(s[:room])
		s = s[room:]
	}
	o.tail = append(o.tail, s)
	n := 0
	for _, t := range o.tail {
		n += len(t)
	}
	for n > half && len(o.tail) > 0 {
		drop := min(n-half, len(o.tail[0]))
		o.tail[0] = o.tail[0][drop:]
		o.cut += drop
		n -= drop
		if o.tail[0] == "" {
			o.tail = o.tail[1:]
		}
	}
}

func (o *output) event(e kernel.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// The client kept the head and tail of each long string (at least
	// MaxOutputChars/2 bytes each), so what it cut lies in the middle that
	// add drops too: the two counts together are what is missing.
	o.shrunk += e.Dropped
	switch e.Type {
	case kernel.EventStream:
		o.add(ansi.ReplaceAllString(e.Text, ""))
	case kernel.EventExecuteResult, kernel.EventDisplayData, kernel.EventUpdateDisplayData:
		o.display(e)
	case kernel.EventError:
		if e.Error != nil {
			o.errText = renderError(e.Error)
		}
	case kernel.EventClearOutput:
		// A notebook would clear; a transcript keeps what was said.
	}
}

// display renders rich output: an image as an image block, HTML kept in
// structuredContent, text/plain as text.
func (o *output) display(e kernel.Event) {
	rich := map[string]any{"type": e.Type}
	for _, mime := range []string{"image/png", "image/jpeg"} {
		if b64, ok := e.TextData(mime); ok {
			data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
			switch {
			case err != nil:
				o.add(fmt.Sprintf("[an %s that is not valid base64 was dropped]\n", mime))
			case len(data) > MaxImageBytes || len(o.images) >= MaxImages:
				o.dropped++
			default:
				o.images = append(o.images, tools.Content{Type: "image", MimeType: mime, Data: data})
				rich["image"] = len(o.images) - 1
			}
			break
		}
	}
	if html, ok := e.TextData("text/html"); ok {
		rich["html"] = html
	}
	if plain, ok := e.TextData("text/plain"); ok {
		rich["text"] = plain
		_, isImage := rich["image"]
		if !isImage || !strings.HasPrefix(plain, "<Figure") {
			if e.Type == kernel.EventExecuteResult {
				o.last = plain
			}
			o.add(plain + "\n")
		}
	}
	if len(rich) > 1 {
		o.rich = append(o.rich, rich)
	}
}

// droppedNote says how much of a cell's output was dropped: cut by berth
// from the middle of what arrived, beyond MaxOutputChars, and lost by the
// kernel before it arrived (kernel.ExecuteReply.OutputDropped).
func droppedNote(cut, lost int64, head, tail int) string {
	kept := fmt.Sprintf("kept the first %s and last %s", thousands(int64(head)), thousands(int64(tail)))
	if head+tail == 0 {
		kept = "kept none of it"
	}
	if lost > 0 {
		kept += fmt.Sprintf("; the kernel dropped %s of them, written faster than berth could read", thousands(lost))
	}
	return fmt.Sprintf("[… %s bytes of output dropped (%s): print less, or write large output to a file and read the part you need …]", thousands(cut+lost), kept)
}

// thousands writes n with thousands separators: 12,345.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func renderError(e *kernel.ExecError) string {
	if e == nil {
		return "the cell failed"
	}
	frames := make([]string, len(e.Traceback))
	for i, f := range e.Traceback {
		frames[i] = ansi.ReplaceAllString(f, "")
	}
	tb := strings.Join(trimLibraryFrames(frames), "\n")
	if strings.TrimSpace(tb) == "" {
		return e.Name + ": " + e.Value
	}
	return tb
}

// frameFile finds a traceback entry's file: IPython's "File PATH:LINE, in
// f" and Python's `  File "PATH", line N, in f`.
var frameFile = regexp.MustCompile(`^(?:File (\S+?):\d+|\s*File "([^"]+)", line \d+)`)

// libraryPath matches the files of installed libraries and the standard
// library, and captures the part a reader knows them by.
var libraryPath = regexp.MustCompile(`(?:/(?:site|dist)-packages/|/lib/python3[.0-9]*/|/node_modules/)(.+)$`)

// trimLibraryFrames leaves out of a traceback (one entry a frame) each run
// of two or more frames in libraries between the code's own frames,
// saying how many and in which files; the innermost frame, where the
// error was raised, stays.
func trimLibraryFrames(tb []string) []string {
	lib := func(i int) string {
		m := frameFile.FindStringSubmatch(tb[i])
		if m == nil {
			return ""
		}
		p := m[1] + m[2]
		if l := libraryPath.FindStringSubmatch(p); l != nil {
			return l[1]
		}
		return ""
	}
	last := -1 // the innermost frame
	for i := range tb {
		if frameFile.MatchString(tb[i]) {
			last = i
		}
	}
	var out []string
	for i := 0; i < len(tb); {
		j := i
		for j < len(tb) && j != last && lib(j) != "" {
			j++
		}
		if j-i < 2 {
			out = append(out, tb[i])
			i++
			continue
		}
		var files []string
		for k := i; k < j; k++ {
			if f := lib(k); !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
		more := ""
		if len(files) > 3 {
			files, more = files[:3], fmt.Sprintf(" and %d more", len(files)-3)
		}
		out = append(out, fmt.Sprintf("[… %d frames in libraries left out: %s%s …]", j-i, strings.Join(files, ", "), more))
		i = j
	}
	return out
}

// run executes a cell under the inactivity budget, with the tool() bridge.
//
// A call cut short because the sandbox became unavailable (paused, its
// engine out of reach: the cause of ctx wraps sandbox.ErrUnavailable)
// leaves its cell running: the frozen kernel cannot be interrupted, and
// giving up on it would cost its state. The cell is carried on (carry)
// and its result goes with the next call.
func (s *Supervisor) run(ctx context.Context, k *kern, code string) (*tools.Result, error) {
	out := &output{}
	w := newWatchdog(s.opts.Budget, s.opts.WallLimit)
	// The cell's own context outlives a cut call (carry); the call's end
	// for any other reason, the budget and the run's close end it.
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	start := time.Now()
	done := make(chan cellEnd, 1)
	go func() {
		rep, err := k.client.Execute(ectx, code, kernel.ExecuteOptions{
			OnEvent: func(e kernel.Event) {
				w.activity()
				out.event(e)
				if e.Type == kernel.EventStream && ctx.Err() == nil && tools.Following(ctx) {
					if line := lastLine(e.Text); line != "" {
						tools.Progress(ctx, e.Name+": "+line)
					}
				}
			},
			OnInput: func(ictx context.Context, req kernel.InputRequest) (string, error) {
				w.pause()
				defer w.resume()
				return s.bridge(ictx, ctx, req)
			},
		})
		done <- cellEnd{rep, err}
	}()
	var end cellEnd
	select {
	case end = <-done:
	case <-w.fired:
		cancel()
		end = <-done
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), sandbox.ErrUnavailable) && s.carry(k, out, w, done, cancel, start) {
			return nil, ctx.Err()
		}
		cancel()
		end = <-done
	}
	cancel()
	w.stop()
	s.mu.Lock()
	k.cells++
	s.mu.Unlock()
	rep, err := end.rep, end.err
	var res *tools.Result
	switch {
	case err == nil:
		res = out.result(rep)
	case w.why() != "":
		// The budget ran out: interrupt, and keep the kernel if that works.
		res = s.interrupted(ctx, k, out, w.why(), time.Since(start))
	case ctx.Err() != nil:
		// The caller went away mid-cell: interrupt so the next call is not
		// stuck behind an abandoned cell.
		s.abandon(k)
		return nil, ctx.Err()
	case errors.Is(err, kernel.ErrNotTaken):
		return nil, fmt.Errorf("%w: %w", errNotTaken, err)
	case errors.Is(err, kernel.ErrDead):
		res = out.result(nil)
		res.IsError = true
		res.AppendText(fmt.Sprintf("berth lost the %s kernel while it ran the cell (%s); the next call re-attaches to it if it still runs (its state kept), or starts a new kernel and says so", k.lang, k.dead()))
	default:
		res = out.result(nil)
		res.IsError = true
		res.AppendText("the cell could not be run: " + err.Error())
	}
	return res, nil
}

// cellEnd is what Execute returned for a cell.
type cellEnd struct {
	rep *kernel.ExecuteReply
	err error
}

// carriedRecheck is how often a carried cell whose budget ran out asks
// whether its sandbox answers again before it interrupts the cell: a
// frozen kernel takes no interrupt.
const carriedRecheck = 5 * time.Second

// carriedNoteMax bounds the output of a carried cell shown with the next
// call.
const carriedNoteMax = 4000

// carry lets the cell of a call cut short by an unavailable sandbox run
// on in the background under its budget: the kernel is marked settling,
// so the next call waits for the cell's end (bounded by its own context),
// and the cell's result goes with that call as a note. It reports false
// when the run is closing (the caller then ends the cell as for an
// abandoned call).
func (s *Supervisor) carry(k *kern, out *output, w *watchdog, done <-chan cellEnd, cancel context.CancelFunc, start time.Time) bool {
	settled := make(chan struct{})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	k.settling = settled
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer w.stop()
		defer cancel()
		var end cellEnd
		select {
		case end = <-done:
		case <-s.bg.Done():
			cancel()
			<-done
			s.mu.Lock()
			k.settling = nil
			s.mu.Unlock()
			close(settled)
			return
		case <-w.fired:
			// No interrupt reaches a frozen kernel: wait for the sandbox.
			for errors.Is(sandbox.CheckWithin(s.bg, s.sb), sandbox.ErrUnavailable) {
				t := time.NewTimer(carriedRecheck)
				select {
				case end = <-done:
				case <-s.bg.Done():
				case <-t.C:
				}
				t.Stop()
				if end.rep != nil || end.err != nil || s.bg.Err() != nil {
					break
				}
			}
			if end.rep == nil && end.err == nil {
				cancel()
				end = <-done
			}
		}
		s.mu.Lock()
		k.cells++
		s.mu.Unlock()
		var res *tools.Result
		switch {
		case end.err == nil:
			res = out.result(end.rep)
		case w.why() != "" && s.bg.Err() == nil:
			res = s.interrupted(s.bg, k, out, w.why(), time.Since(start))
		default:
			res = out.result(nil)
			res.IsError = true
			res.AppendText("it did not finish: " + end.err.Error())
		}
		status := "ok"
		if res.IsError {
			status = "an error"
		}
		note := fmt.Sprintf("the %s cell of the call cut short while the sandbox was unavailable ran on in the kept kernel; its result (%s): %s",
			k.lang, status, proc.Clip(res.AllText(), carriedNoteMax))
		s.mu.Lock()
		s.notes[k.lang] = append(s.notes[k.lang], note)
		k.settling = nil
		s.mu.Unlock()
		close(settled)
	}()
	return true
}

// result turns the collected output into a tool result.
func (o *output) result(rep *kernel.ExecuteReply) *tools.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	head, tail := o.text.String(), strings.Join(o.tail, "")
	var lost int64
	if rep != nil {
		lost = rep.OutputDropped
	}
	text := head + tail
	switch {
	case int64(o.cut)+o.shrunk > 0:
		text = head + "\n" + droppedNote(int64(o.cut)+o.shrunk, lost, len(head), len(tail)) + "\n" + tail
	case lost > 0:
		// Where the kernel lost output is not known: say so after what came.
		text = strings.TrimRight(head+tail, "\n")
		if text != "" {
			text += "\n"
		}
		text += droppedNote(0, lost, len(head), len(tail))
	}
	res := &tools.Result{}
	isErr := false
	if rep != nil && rep.Status == "error" {
		isErr = true
		if o.errText == "" {
			o.errText = renderError(rep.Error)
		}
	}
	if rep != nil && rep.Status == "aborted" {
		isErr = true
		o.errText = "the cell was aborted (an earlier cell failed)"
	}
	if o.errText != "" {
		isErr = true
		text = strings.TrimRight(text, "\n")
		if text != "" {
			text += "\n"
		}
		text += o.errText
	}
	if strings.TrimSpace(text) == "" && len(o.images) == 0 {
		text = "(no output)"
	}
	if text != "" {
		res.Content = append(res.Content, tools.Content{Type: "text", Text: strings.TrimRight(text, "\n")})
	}
	res.Content = append(res.Content, o.images...)
	if o.dropped > 0 {
		res.AppendText(fmt.Sprintf("[%d more images not shown]", o.dropped))
	}
	res.IsError = isErr
	sc := map[string]any{}
	if rep != nil {
		sc["execution_count"] = rep.ExecutionCount
		sc["status"] = rep.Status
	}
	if len(o.rich) > 0 {
		sc["outputs"] = o.rich
	}
	if o.last != "" {
		sc["result"] = o.last
	}
	res.StructuredContent = sc
	return res
}

// interrupted interrupts a cell whose budget ran out and waits for it to
// end; when it does not, the kernel is restarted.
func (s *Supervisor) interrupted(ctx context.Context, k *kern, out *output, why string, ran time.Duration) *tools.Result {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.InterruptWait)
	defer cancel()
	ierr := k.interruptKernel(ictx)
	// The cell's reply (a KeyboardInterrupt error) tells that it ended;
	// a tiny cell behind it proves the kernel answers again.
	var alive bool
	if ierr == nil {
		if rep, err := k.client.Execute(ictx, "", kernel.ExecuteOptions{Silent: true}); err == nil && rep != nil {
			alive = true
		}
	}
	res := out.result(nil)
	res.IsError = true
	msg := fmt.Sprintf("the cell was interrupted after %v: %s", ran.Round(time.Second), why)
	if alive {
		msg += fmt.Sprintf("; the %s kernel survived and keeps its state", k.lang)
	} else {
		s.mu.Lock()
		if s.kernels[k.lang] == k {
			delete(s.kernels, k.lang)
			s.gen++
		}
		s.mu.Unlock()
		k.stop(ctx)
		msg += fmt.Sprintf("; the interrupt did not stop it, so the %s kernel was killed and its state is lost (the next call starts a new one)", k.lang)
	}
	res.AppendText(msg)
	return res
}

// abandon interrupts a cell whose caller went away, in the background; the
// kernel is replaced when the interrupt does not end the cell.
func (s *Supervisor) abandon(k *kern) {
	settled := make(chan struct{})
	s.mu.Lock()
	k.settling = settled
	s.mu.Unlock()
	go func() {
		defer func() {
			s.mu.Lock()
			k.settling = nil
			s.mu.Unlock()
			close(settled)
		}()
		ctx, cancel := context.WithTimeout(s.runCtx, s.opts.InterruptWait)
		defer cancel()
		if err := k.interruptKernel(ctx); err == nil {
			if _, err := k.client.Execute(ctx, "", kernel.ExecuteOptions{Silent: true}); err == nil {
				return
			}
		}
		s.mu.Lock()
		if s.kernels[k.lang] == k {
			delete(s.kernels, k.lang)
			s.gen++
			s.notes[k.lang] = append(s.notes[k.lang], fmt.Sprintf("the %s kernel did not stop the cell abandoned by an earlier call and was restarted: its state was lost", k.lang))
		}
		s.mu.Unlock()
		k.stop(context.Background())
	}()
}

// bridge answers an input_request. A tool() envelope (kernel/bundled's
// protocol) calls the run's tool through the registry, on the surface of
// the eval call — the same gates and middleware as a model's call; any
// other prompt is a plain input(), which a model cannot answer.
func (s *Supervisor) bridge(ctx, callCtx context.Context, req kernel.InputRequest) (string, error) {
	tr, ok := bundled.ParseToolRequest(req.Prompt)
	if !ok {
		return "", fmt.Errorf("the cell asked for input (%q), which eval cannot give: pass values in the code instead", proc.Clip(req.Prompt, 100))
	}
	if t, found := s.reg.Lookup(tr.Tool); found && t.Serial {
		return bundled.ReplyError(fmt.Sprintf("tool(%q) cannot be called from inside a cell: %s keeps state across calls (one call at a time), so call it as a tool yourself", tr.Tool, tr.Tool)), nil
	}
	res, err := s.reg.Call(ctx, tools.SurfaceOf(callCtx), tr.Tool, tr.Args)
	if err != nil {
		return bundled.ReplyError(err.Error()), nil
	}
	if res.IsError {
		return bundled.ReplyError(res.AllText()), nil
	}
	return bundled.ReplyOK(res.AllText())
}

// watchdog is the cell's inactivity budget: activity resets it, a bridge
// call pauses it, and an optional wall limit ends the cell regardless.
type watchdog struct {
	mu     sync.Mutex
	budget time.Duration
	timer  *time.Timer
	wall   *time.Timer
	paused int
	reason string
	fired  chan struct{}
	once   sync.Once
}

func newWatchdog(budget, wall time.Duration) *watchdog {
	w := &watchdog{budget: budget, fired: make(chan struct{})}
	w.timer = time.AfterFunc(budget, func() { w.fire(fmt.Sprintf("no output for %v (the inactivity budget)", budget)) })
	if wall > 0 {
		w.wall = time.AfterFunc(wall, func() { w.fire(fmt.Sprintf("it ran longer than the %v limit for one cell", wall)) })
	}
	return w
}

func (w *watchdog) fire(why string) {
	w.mu.Lock()
	if w.paused > 0 && !strings.Contains(why, "limit") {
		w.mu.Unlock()
		return
	}
	w.reason = why
	w.mu.Unlock()
	w.once.Do(func() { close(w.fired) })
}

func (w *watchdog) why() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reason
}

func (w *watchdog) activity() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused == 0 {
		w.timer.Reset(w.budget)
	}
}

func (w *watchdog) pause() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused++
	w.timer.Stop()
}

func (w *watchdog) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused--
	if w.paused == 0 {
		w.timer.Reset(w.budget)
	}
}

func (w *watchdog) stop() {
	w.timer.Stop()
	if w.wall != nil {
		w.wall.Stop()
	}
}

// lastLine is the last non-empty line of text, for a progress note.
func lastLine(text string) string {
	text = strings.TrimRight(text, "\r\n \t")
	if i := strings.LastIndexAny(text, "\r\n"); i >= 0 {
		text = text[i+1:]
	}
	return text
}
