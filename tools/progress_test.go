package tools

import (
	"context"
	"strings"
	"testing"
)

func TestProgress(t *testing.T) {
	Progress(context.Background(), "nobody follows") // does nothing
	if Following(context.Background()) {
		t.Error("Following without a receiver")
	}
	var got []string
	ctx := WithProgress(context.Background(), func(n string) { got = append(got, n) })
	if !Following(ctx) {
		t.Error("Following with a receiver = false")
	}
	Progress(ctx, "")
	Progress(ctx, "starting gopls")
	long := strings.Repeat("a", MaxProgressChars) + "the end"
	Progress(ctx, long)
	if len(got) != 2 || got[0] != "starting gopls" {
		t.Fatalf("notes %q", got)
	}
	if r := []rune(got[1]); len(r) != MaxProgressChars || !strings.HasPrefix(got[1], "…") || !strings.HasSuffix(got[1], "the end") {
		t.Errorf("a long note: %d runes %q; want its end, %d runes", len(r), got[1], MaxProgressChars)
	}
}
