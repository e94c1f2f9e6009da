package questions

import (
	"fmt"
	"slices"
	"strings"
)

// Caps on a question card.
const (
	MaxOptions     = 32
	MaxLabelBytes  = 200
	MaxAnswerBytes = 16 << 10
)

// CheckOptions checks a question's options: at most MaxOptions, each label
// non-empty, at most MaxLabelBytes, and unique. The error wraps
// ErrBadAnswer.
func CheckOptions(opts []Option) error {
	if len(opts) > MaxOptions {
		return fmt.Errorf("questions: %d options is more than %d: offer fewer choices (allow free text for the rest): %w", len(opts), MaxOptions, ErrBadAnswer)
	}
	seen := map[string]bool{}
	for i, o := range opts {
		l := strings.TrimSpace(o.Label)
		switch {
		case l == "":
			return fmt.Errorf("questions: option %d has an empty label: give every option a label: %w", i+1, ErrBadAnswer)
		case len(o.Label) > MaxLabelBytes:
			return fmt.Errorf("questions: option %d's label is longer than %d bytes: keep labels short and put detail in description: %w", i+1, MaxLabelBytes, ErrBadAnswer)
		case seen[o.Label]:
			return fmt.Errorf("questions: option label %q appears twice: labels must be unique: %w", o.Label, ErrBadAnswer)
		}
		seen[o.Label] = true
	}
	return nil
}

// Check reports whether a fits card c. A question takes a skip, or choices
// among its options (one unless multi_select), free text where allowed, or
// both; a permission request takes a decision, and one whose call was too
// large to show (TooLarge) only deny. The error wraps
// ErrBadAnswer and says what would fit.
func Check(c Card, a Answer) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("questions: "+format+": %w", append(args, ErrBadAnswer)...)
	}
	if c.Kind == KindPermission {
		if len(a.Choice) > 0 || a.Text != "" || a.Skip {
			return bad("card %d is a permission request: answer with {\"decision\": \"approve\" | \"deny\" | \"allow_run\"}", c.N)
		}
		switch a.Decision {
		case Approve, AllowRun:
			if c.TooLarge {
				return bad("card %d's call is too large to show whole, and nothing is approved that was not shown: it can only be denied, send {\"decision\": \"deny\"}", c.N)
			}
			return nil
		case Deny:
			return nil
		case "":
			return bad("card %d is a permission request and the answer has no decision: send {\"decision\": \"approve\" | \"deny\" | \"allow_run\"}", c.N)
		}
		return bad("unknown decision %q: use approve, deny or allow_run", a.Decision)
	}
	if a.Decision != "" {
		return bad("card %d is a question, not a permission request: answer with choice, text or skip", c.N)
	}
	if a.Skip {
		if len(a.Choice) > 0 || a.Text != "" {
			return bad("a skip carries no choice or text: send {\"skip\": true} alone")
		}
		return nil
	}
	if len(a.Text) > MaxAnswerBytes {
		return bad("the text is longer than %d bytes: shorten it", MaxAnswerBytes)
	}
	if a.Text != "" && !c.AllowFreeText {
		return bad("card %d does not accept free text: choose among %s", c.N, labels(c.Options))
	}
	if len(a.Choice) == 0 && strings.TrimSpace(a.Text) == "" {
		if c.AllowFreeText {
			return bad("the answer is empty: send choice, text, or skip")
		}
		return bad("the answer is empty: choose among %s, or skip", labels(c.Options))
	}
	if len(a.Choice) > 1 && !c.MultiSelect {
		return bad("card %d takes one choice, and the answer has %d: pick one of %s", c.N, len(a.Choice), labels(c.Options))
	}
	for i, ch := range a.Choice {
		if !slices.ContainsFunc(c.Options, func(o Option) bool { return o.Label == ch }) {
			if c.AllowFreeText {
				return bad("%q is not one of the options %s: put a typed answer in text instead", ch, labels(c.Options))
			}
			return bad("%q is not one of the options %s", ch, labels(c.Options))
		}
		if slices.Contains(a.Choice[:i], ch) {
			return bad("%q is chosen twice", ch)
		}
	}
	return nil
}

func labels(opts []Option) string {
	if len(opts) == 0 {
		return "(no options)"
	}
	q := make([]string, len(opts))
	for i, o := range opts {
		q[i] = fmt.Sprintf("%q", o.Label)
	}
	return strings.Join(q, ", ")
}
