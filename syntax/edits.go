package syntax

import (
	"fmt"
	"sort"
)

// Edits as data: a rewrite's replacements are kept as byte ranges of the
// content they were computed against, so that rewrites made one after the
// other can be told as one set of replacements of the original (Compose),
// and a rewrite computed against some content can be carried over another
// rewrite of that same content (Rebase), as a three-way merge does.

// sortedEdits returns a copy of edits in position order (as Apply applies
// them).
func sortedEdits(edits []Edit) []Edit {
	es := append([]Edit(nil), edits...)
	sort.SliceStable(es, func(i, j int) bool { return es[i].StartByte < es[j].StartByte })
	return es
}

// Compose returns edits of src that do what first does to src and then
// second does to the result: Apply(src, Compose(src, first, second)) equals
// Apply(Apply(src, first), second). first is against src, second against
// Apply(src, first); each must be free of overlaps (as Rewrite returns
// them). A second edit that touches text first wrote merges with that edit.
func Compose(src []byte, first, second []Edit) []Edit {
	f, s := sortedEdits(first), sortedEdits(second)
	if len(f) == 0 || len(s) == 0 {
		return append(f, s...)
	}
	mid := Apply(src, f)
	// A span is a range of mid: text first wrote (k ≥ 0, the index in f)
	// or a range second replaces (k < 0).
	type span struct{ a, b, k int }
	spans := make([]span, 0, len(f)+len(s))
	midStart := make([]int, len(f)) // where f[k]'s text starts in mid
	delta := 0
	for k, e := range f {
		midStart[k] = e.StartByte + delta
		spans = append(spans, span{midStart[k], midStart[k] + len(e.Text), k})
		delta += len(e.Text) - (e.EndByte - e.StartByte)
	}
	for k, e := range s {
		spans = append(spans, span{e.StartByte, e.EndByte, -1 - k})
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].a < spans[j].a })
	// toSrc maps a position of mid outside what first wrote to src.
	toSrc := func(pos int) int {
		d := 0
		for k, e := range f {
			if midStart[k]+len(e.Text) > pos {
				break
			}
			d += len(e.Text) - (e.EndByte - e.StartByte)
		}
		return pos - d
	}
	var out []Edit
	for i := 0; i < len(spans); {
		ga, gb := spans[i].a, spans[i].b
		j := i + 1
		for j < len(spans) && spans[j].a <= gb {
			gb = max(gb, spans[j].b)
			j++
		}
		group := spans[i:j]
		i = j
		start, end := toSrc(ga), toSrc(gb)
		var inner []Edit
		for _, sp := range group {
			if sp.k >= 0 {
				e := f[sp.k]
				if sp.a == ga {
					start = min(start, e.StartByte)
				}
				if sp.b == gb {
					end = max(end, e.EndByte)
				}
				continue
			}
			e := s[-1-sp.k]
			inner = append(inner, Edit{StartByte: e.StartByte - ga, EndByte: e.EndByte - ga, Text: e.Text})
		}
		out = append(out, Edit{StartByte: start, EndByte: end, Text: string(Apply(mid[ga:gb], inner))})
	}
	return out
}

// ConflictError is Rebase's refusal: Edit, one of the edits to carry over,
// overlaps Over, one of the edits already made.
type ConflictError struct {
	Edit, Over Edit
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("syntax: the edit of bytes %d–%d overlaps the edit of bytes %d–%d made since", e.Edit.StartByte, e.Edit.EndByte, e.Over.StartByte, e.Over.EndByte)
}

// Rebase carries edits over others: both are edits of the same content src
// (each free of overlaps), others already applied; Rebase returns edits
// that do to Apply(src, others) what edits did to src. It fails with a
// *ConflictError when an edit overlaps one of others, or when both insert
// at the same position; edits that only touch (one ends where the other
// starts) are carried over, an insertion at the edge of a replaced range
// landing on that side of the replacement.
func Rebase(edits, others []Edit) ([]Edit, error) {
	es, os := sortedEdits(edits), sortedEdits(others)
	out := make([]Edit, 0, len(es))
	delta, k := 0, 0
	for _, e := range es {
		for k < len(os) && os[k].EndByte <= e.StartByte && !(os[k].StartByte == e.StartByte && os[k].EndByte == e.StartByte && e.EndByte == e.StartByte) {
			delta += len(os[k].Text) - (os[k].EndByte - os[k].StartByte)
			k++
		}
		for _, o := range os[k:] {
			if o.StartByte > e.EndByte {
				break
			}
			overlap := e.StartByte < o.EndByte && o.StartByte < e.EndByte
			sameInsert := e.StartByte == e.EndByte && o.StartByte == o.EndByte && e.StartByte == o.StartByte
			if overlap || sameInsert {
				return nil, &ConflictError{Edit: e, Over: o}
			}
		}
		out = append(out, Edit{StartByte: e.StartByte + delta, EndByte: e.EndByte + delta, Text: e.Text})
	}
	return out, nil
}
