package runstore

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestRedaction prints records and residents every way berth might: the
// secret and the state's contents appear in none of them, though the
// stored form (JSON) keeps both.
func TestRedaction(t *testing.T) {
	r := rec("run-1", epoch)
	secret := r.Resident.Secret
	leaks := map[string]string{
		"secret":          string(secret),
		"secret (base64)": base64.StdEncoding.EncodeToString(secret),
		"secret (hex)":    hex.EncodeToString(secret),
		"secret (bytes)":  strings.Trim(fmt.Sprint([]byte(secret[:8])), "[]"),
		"state contents":  "kernel-hmac-key-run-1",
	}
	report := Report{Path: "/state/runs.db", Fresh: true, Damage: errors.New("invalid database"),
		MovedTo: "/state/runs.db.corrupt-x", Salvaged: []Record{r}, SalvageNote: "1 run read through the file's own index"}

	values := map[string]any{
		"Resident":  *r.Resident,
		"*Resident": r.Resident,
		"Record":    r,
		"*Record":   &r,
		"[]Record":  []Record{r},
		"map":       map[string]Record{"x": r},
		"struct":    struct{ Run Record }{r},
		"Report":    report,
	}
	containers := map[string]bool{"[]Record": true, "map": true, "struct": true}
	var out []string
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d", "%x", "%X"} {
			out = append(out, name+" "+verb+": "+fmt.Sprintf(verb, v))
		}
		handlers := map[string]func(*bytes.Buffer) slog.Handler{
			"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
			"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		}
		for hname, h := range handlers {
			if containers[name] && hname == "json" {
				continue // slog's JSON handler marshals what holds a Record: its stored form
			}
			var b bytes.Buffer
			slog.New(h(&b)).Info("run", "value", v)
			out = append(out, name+" slog "+hname+": "+b.String())
		}
	}
	out = append(out, "String: "+r.String(), "GoString: "+r.GoString(), "Resident.String: "+r.Resident.String(), "Report.String: "+report.String())

	for _, o := range out {
		for what, leak := range leaks {
			if strings.Contains(o, leak) {
				t.Errorf("%s shows the %s", o, what)
			}
		}
	}
	// Something was printed: the resident's directory, and that a secret
	// was there.
	for _, o := range out {
		if name, _, _ := strings.Cut(o, ":"); strings.HasPrefix(name, "Report") {
			continue
		}
		if !strings.Contains(o, "/tmp/berth-run-run-1") || !strings.Contains(o, "redacted") {
			t.Errorf("%s: want the resident's directory and a redacted secret", o)
		}
	}

	// The stored form keeps everything.
	stored, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{leaks["secret (base64)"], leaks["state contents"]} {
		if !bytes.Contains(stored, []byte(want)) {
			t.Errorf("stored form %s lacks %q", stored, want)
		}
	}
}

// TestRedactionNil prints a record without a resident and a nil one.
func TestRedactionNil(t *testing.T) {
	r := rec("run-1", epoch)
	r.Resident = nil
	var nilResident *Resident
	for _, got := range []string{fmt.Sprintf("%v", r), fmt.Sprintf("%#v", r), fmt.Sprintf("%v", nilResident)} {
		if strings.Contains(got, "PANIC") || !strings.Contains(got, "nil") {
			t.Errorf("printed %q", got)
		}
	}
}
