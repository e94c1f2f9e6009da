// Package ask is the ask_user tool (docs/tools.md §9): the only way a run asks
// the operator anything. It draws a numbered question card through the
// run's question port and blocks until someone answers, skips, or the
// question times out.
//
// A question asked before berth restarted (its card restored by the port,
// its call gone with the old berth process) is not lost: a retry of the
// same question gets the card's answer, or waits on the same card, and
// answers no call took are reported by the next ask_user result
// (questions.Port.Restore, Port.TakeUnclaimed).
//
// ASK-1: a skip is a success whose text tells the model to proceed on a
// stated assumption and not ask again; a timeout is an error carrying the
// same instruction. ASK-3: the controller registers it only when the run
// has a question port; with nobody connected the call fails at once
// (fail-closed) instead of blocking.
package ask

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
)

// DefaultTimeout is how long ask_user waits for an answer.
const DefaultTimeout = 10 * time.Minute

// MaxQuestionBytes caps the question and its context.
const MaxQuestionBytes = 8 << 10

// Options configure [Register].
type Options struct {
	// Timeout overrides DefaultTimeout.
	Timeout time.Duration
}

// Input is ask_user's arguments.
type Input struct {
	Question      string             `json:"question" jsonschema:"what to ask, as one clear question"`
	Context       string             `json:"context,omitempty" jsonschema:"why you ask, and what depends on the answer"`
	Options       []questions.Option `json:"options,omitempty" jsonschema:"choices to pick from, each with a unique label"`
	AllowFreeText bool               `json:"allow_free_text,omitempty" jsonschema:"whether a typed answer is accepted"`
	MultiSelect   bool               `json:"multi_select,omitempty" jsonschema:"whether several choices may be picked"`
}

// Description is ask_user's tool description.
const Description = `Ask the human operator a question and wait for the answer. It draws a numbered card in the conversation and blocks until someone answers, skips, or the question times out. This is the only way to ask the operator anything: never write a question as a chat message, which ends your turn. Offer options (unique labels) where you can; set allow_free_text for a typed answer and multi_select to allow several choices. If the operator skips, proceed on your stated assumption and do not ask again.`

// Tool is ask_user as a registry lists it.
var Tool = tools.Tool{Name: "ask_user", Description: Description, Level: tools.LevelRead}

// Register adds ask_user to r, drawing cards through port. port must not
// be nil: a run without a question port does not get the tool (ASK-3).
func Register(r *tools.Registry, port *questions.Port, opts Options) {
	if port == nil {
		panic("ask: Register needs a question port")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	tools.Register(r, Tool,
		func(ctx context.Context, in Input) (*tools.Result, error) {
			return ask(ctx, port, opts.Timeout, in)
		})
}

// assumption is the instruction a skip and a timeout carry (ASK-1).
const assumption = "Proceed on a reasonable assumption: state the assumption you make in your reply, and do not ask this question again."

func ask(ctx context.Context, port *questions.Port, timeout time.Duration, in Input) (*tools.Result, error) {
	in.Question = strings.TrimSpace(in.Question)
	switch {
	case in.Question == "":
		return nil, &tools.InputError{Tool: "ask_user", Msg: "question is empty: write the question to ask"}
	case len(in.Question)+len(in.Context) > MaxQuestionBytes:
		return nil, &tools.InputError{Tool: "ask_user", Msg: fmt.Sprintf("question and context exceed %d bytes: ask a shorter question", MaxQuestionBytes)}
	case len(in.Options) == 0 && !in.AllowFreeText:
		return nil, &tools.InputError{Tool: "ask_user", Msg: "the question has no options and does not allow free text, so it cannot be answered: add options or set allow_free_text"}
	case in.MultiSelect && len(in.Options) < 2:
		return nil, &tools.InputError{Tool: "ask_user", Msg: "multi_select needs at least two options"}
	}
	if err := questions.CheckOptions(in.Options); err != nil {
		return nil, &tools.InputError{Tool: "ask_user", Msg: err.Error(), Err: err}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := answer(ctx, wctx, port, timeout, in)
	if res != nil {
		reportUnclaimed(res, port.TakeUnclaimed())
	}
	return res, err
}

// answer asks in's question through port and words the outcome.
func answer(ctx, wctx context.Context, port *questions.Port, timeout time.Duration, in Input) (*tools.Result, error) {
	card, a, err := port.Ask(wctx, questions.Card{
		Kind:          questions.KindQuestion,
		Question:      in.Question,
		Context:       in.Context,
		Options:       in.Options,
		AllowFreeText: in.AllowFreeText,
		MultiSelect:   in.MultiSelect,
	})
	switch {
	case errors.Is(err, questions.ErrNoSubscriber) && card.N != 0:
		return tools.Errorf("ask_user: card %d closed unanswered: everyone watching the run left and no one came back within %v. %s", card.N, questions.ListenerGrace, assumption), nil
	case errors.Is(err, questions.ErrNoSubscriber):
		return tools.Errorf("ask_user: no one is connected to answer questions in this run, so the question was not asked. %s", assumption), nil
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err() // the caller went away; the card is closed
	case errors.Is(err, context.DeadlineExceeded):
		return tools.Errorf("ask_user: card %d timed out: no answer within %v. %s", card.N, timeout.Round(time.Second), assumption), nil
	case err != nil:
		return tools.Errorf("ask_user: the question could not be asked: %v. %s", err, assumption), nil
	}
	restored := ""
	if card.Restored {
		restored = " (asked before berth restarted)"
	}
	if a.Skip {
		sc := map[string]any{"card": card.N, "skipped": true}
		if card.Restored {
			sc["restored"] = true
		}
		return &tools.Result{
			Content:           []tools.Content{{Type: "text", Text: fmt.Sprintf("Card %d%s was skipped without an answer. %s", card.N, restored, assumption)}},
			StructuredContent: sc,
		}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Card %d%s was answered.", card.N, restored)
	writeAnswer(&b, a)
	sc := map[string]any{"card": card.N, "choice": a.Choice}
	if a.Choice == nil {
		sc["choice"] = []string{}
	}
	if a.Text != "" {
		sc["text"] = a.Text
	}
	if card.Restored {
		sc["restored"] = true
	}
	return &tools.Result{Content: []tools.Content{{Type: "text", Text: b.String()}}, StructuredContent: sc}, nil
}

// writeAnswer writes an answer's choices and text, each on its own line.
func writeAnswer(b *strings.Builder, a questions.Answer) {
	if len(a.Choice) > 0 {
		q := make([]string, len(a.Choice))
		for i, c := range a.Choice {
			q[i] = fmt.Sprintf("%q", c)
		}
		fmt.Fprintf(b, "\nChose: %s", strings.Join(q, ", "))
	}
	if a.Text != "" {
		fmt.Fprintf(b, "\nWrote: %s", a.Text)
	}
}

// EarlierAnswer is an answer reported in structuredContent's
// earlier_answers: to a card asked before berth restarted, given after the
// call that asked it had ended.
type EarlierAnswer struct {
	Card     int      `json:"card"`
	Question string   `json:"question"`
	Choice   []string `json:"choice,omitempty"`
	Text     string   `json:"text,omitempty"`
	Skipped  bool     `json:"skipped,omitempty"`
}

// reportUnclaimed adds to res the answers to cards asked before berth
// restarted that no call took, so that the model learns them.
func reportUnclaimed(res *tools.Result, us []questions.Unclaimed) {
	if len(us) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("\n\nAnswers to questions you asked before berth restarted, given after those ask_user calls had ended:")
	earlier := make([]EarlierAnswer, len(us))
	for i, u := range us {
		fmt.Fprintf(&b, "\n- card %d, %q:", u.Card.N, cutQuestion(u.Card.Question))
		earlier[i] = EarlierAnswer{Card: u.Card.N, Question: u.Card.Question, Choice: u.Answer.Choice, Text: u.Answer.Text, Skipped: u.Answer.Skip}
		if u.Answer.Skip {
			b.WriteString(" skipped; proceed on your stated assumption.")
			continue
		}
		var ab strings.Builder
		writeAnswer(&ab, u.Answer)
		b.WriteString(strings.ReplaceAll(ab.String(), "\n", "\n  "))
	}
	b.WriteString("\nTake them into account; where you already went on an assumption they contradict, say so and correct course.")
	text := b.String()
	if len(res.Content) > 0 && res.Content[len(res.Content)-1].Type == "text" {
		res.Content[len(res.Content)-1].Text += text
	} else {
		res.Content = append(res.Content, tools.Content{Type: "text", Text: strings.TrimPrefix(text, "\n\n")})
	}
	sc, ok := res.StructuredContent.(map[string]any)
	if !ok {
		if res.StructuredContent != nil {
			return
		}
		sc = map[string]any{}
		res.StructuredContent = sc
	}
	sc["earlier_answers"] = earlier
}

// maxQuoted bounds a question quoted in a report of earlier answers.
const maxQuoted = 200

func cutQuestion(q string) string {
	if len(q) <= maxQuoted {
		return q
	}
	i := maxQuoted
	for i > 0 && q[i]&0xC0 == 0x80 {
		i--
	}
	return q[:i] + "…"
}
