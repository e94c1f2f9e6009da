package structural

import (
	"bytes"
	"fmt"
	"strings"
)

// maxDiffEdits bounds the edit distance the line diff searches for; past it
// the changed region is shown as one replacement.
const maxDiffEdits = 2000

// UnifiedDiff returns the unified diff of a file's old and new content with
// context unchanged lines around each change, headed "--- a/path" and
// "+++ b/path"; "" when they are equal.
func UnifiedDiff(path string, old, new []byte, context int) string {
	if bytes.Equal(old, new) {
		return ""
	}
	if context < 0 {
		context = 0
	}
	a, b := splitLines(old), splitLines(new)
	ops := diffLines(a, b)
	var out strings.Builder
	fmt.Fprintf(&out, "--- a/%s\n+++ b/%s\n", path, path)
	// Group the ops into hunks: runs of changes with at most 2*context
	// equal lines between them.
	type span struct{ start, end int } // indexes into ops
	var hunks []span
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		j := i
		for j < len(ops) {
			if ops[j].kind != ' ' {
				j++
				continue
			}
			k := j
			for k < len(ops) && ops[k].kind == ' ' {
				k++
			}
			if k == len(ops) || k-j > 2*context {
				break
			}
			j = k
		}
		hunks = append(hunks, span{i, j})
		i = j
	}
	for _, h := range hunks {
		start := max(0, h.start-context)
		for start < h.start && ops[start].kind != ' ' {
			start++
		}
		end := min(len(ops), h.end+context)
		aStart, bStart := ops[start].a, ops[start].b
		var aLen, bLen int
		var body strings.Builder
		for _, op := range ops[start:end] {
			var line string
			switch op.kind {
			case ' ':
				line = a[op.a]
				aLen++
				bLen++
			case '-':
				line = a[op.a]
				aLen++
			case '+':
				line = b[op.b]
				bLen++
			}
			body.WriteByte(op.kind)
			body.WriteString(line)
			if !strings.HasSuffix(line, "\n") {
				body.WriteString("\n\\ No newline at end of file\n")
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		out.WriteString(body.String())
	}
	return out.String()
}

// hunkRange writes a hunk's line range: 1-based start and length; an
// empty range names the line before it.
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits b into lines that keep their "\n".
func splitLines(b []byte) []string {
	var lines []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			lines = append(lines, string(b))
			break
		}
		lines = append(lines, string(b[:i+1]))
		b = b[i+1:]
	}
	return lines
}

// diffOp is one line of a diff: ' ' equal, '-' deleted from a, '+' added
// from b; a and b are the line indexes it refers to (for '+', a is the
// position in a where it goes, and for '-', b likewise).
type diffOp struct {
	kind byte
	a, b int
}

// diffLines returns a shortest edit script from a to b (Myers), or one
// replacement of the differing middle when it needs over maxDiffEdits edits.
func diffLines(a, b []string) []diffOp {
	var ops []diffOp
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		ops = append(ops, diffOp{' ', pre, pre})
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops = append(ops, myers(a[pre:len(a)-suf], b[pre:len(b)-suf], pre, pre)...)
	for i := suf; i > 0; i-- {
		ops = append(ops, diffOp{' ', len(a) - i, len(b) - i})
	}
	return ops
}

// myers diffs a and b, whose first lines are at offsets ao and bo.
func myers(a, b []string, ao, bo int) []diffOp {
	n, m := len(a), len(b)
	replace := func() []diffOp {
		var ops []diffOp
		for i := range n {
			ops = append(ops, diffOp{'-', ao + i, bo})
		}
		for j := range m {
			ops = append(ops, diffOp{'+', ao + n, bo + j})
		}
		return ops
	}
	if n == 0 || m == 0 {
		return replace()
	}
	maxD := min(n+m, maxDiffEdits)
	off := maxD + 1
	v := make([]int, 2*off+1)
	var trace [][]int
	found := -1
	for d := 0; d <= maxD && found < 0; d++ {
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		return replace()
	}
	// Backtrack. trace[d] holds v before step d, for k in [-d-1, d+1].
	var rev []diffOp
	x, y := n, m
	for d := found; d > 0; d-- {
		tv := trace[d]
		get := func(k int) int { return tv[k+d+1] }
		k := x - y
		var pk int
		if k == -d || (k != d && get(k-1) < get(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := get(pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, diffOp{' ', ao + x, bo + y})
		}
		if pk == k+1 {
			y--
			rev = append(rev, diffOp{'+', ao + x, bo + y})
		} else {
			x--
			rev = append(rev, diffOp{'-', ao + x, bo + y})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, diffOp{' ', ao + x, bo + y})
	}
	ops := make([]diffOp, len(rev))
	for i := range rev {
		ops[i] = rev[len(rev)-1-i]
	}
	return ops
}
