package images

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestParsePackages(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"comments and blanks", "# header\n\npython3\n  # indented comment\nnodejs # trailing\n", []string{"python3", "nodejs"}},
		{"spaces trimmed", "  procps  \n\tgit\t\n", []string{"procps", "git"}},
		{"no final newline", "a\nb", []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParsePackages([]byte(tt.in)); !slices.Equal(got, tt.want) {
				t.Errorf("ParsePackages(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	got := Names()
	for _, want := range []string{"go", "minimal", "python"} {
		if !slices.Contains(got, want) {
			t.Errorf("Names() = %q, missing %q", got, want)
		}
	}
	if _, err := Packages("no-such-image"); err == nil {
		t.Error(`Packages("no-such-image") returned no error`)
	}
}

// TestRecipes checks what the issue asks of each image, so a recipe edit cannot drop it.
func TestRecipes(t *testing.T) {
	tests := []struct {
		name    string
		must    []string
		mustNot []string
	}{
		{"minimal", []string{"python3", "nodejs", "procps"}, []string{"python3-ipykernel"}},
		{"python", []string{"python3", "python3-ipykernel", "python3-debugpy", "python3-pylsp",
			"python3-pyflakes", "python3-pycodestyle", "python3-pandas", "python3-matplotlib", "procps"}, nil},
		// Debian's golang and delve are too old for Go 1.26: the toolchain comes from setup.
		{"go", []string{"procps", "git", "clangd", "libc6-dev"}, []string{"golang", "golang-go", "delve", "gopls"}},
		// Debian's nodejs is 18, too old for typescript-language-server 5
		// and bash-language-server 5: node comes from setup.
		{"node", []string{"procps", "python3", "shellcheck"}, []string{"nodejs", "npm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkgs, err := Packages(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.must {
				if !slices.Contains(pkgs, p) {
					t.Errorf("images/%s/packages.txt lacks %s", tt.name, p)
				}
			}
			for _, p := range tt.mustNot {
				if slices.Contains(pkgs, p) {
					t.Errorf("images/%s/packages.txt must not have %s", tt.name, p)
				}
			}
		})
	}
}

// TestDockerfilesMatchRecipes keeps each Dockerfile installing exactly the packages of
// its packages.txt, so the registry build and the offline build cannot drift apart.
func TestDockerfilesMatchRecipes(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			want, err := Packages(name)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(name, "Dockerfile"))
			if err != nil {
				t.Fatalf("every image needs a Dockerfile beside its packages.txt: %v", err)
			}
			got := aptInstalls(string(data))
			if dup := duplicates(got); len(dup) > 0 {
				t.Errorf("%s/Dockerfile installs %q more than once", name, dup)
			}
			if dup := duplicates(want); len(dup) > 0 {
				t.Errorf("%s/packages.txt lists %q more than once", name, dup)
			}
			slices.Sort(got)
			got = slices.Compact(got)
			want = slices.Clone(want)
			slices.Sort(want)
			want = slices.Compact(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s/Dockerfile installs %q, packages.txt lists %q; make them the same", name, got, want)
			}
		})
	}
}

// TestGoDockerfileVersions keeps the tool versions of the go Dockerfile equal to setup's.
func TestGoDockerfileVersions(t *testing.T) {
	setup, err := os.ReadFile(filepath.Join("go", "setup"))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join("go", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ variable, module string }{
		{"gopls_version", "golang.org/x/tools/gopls"},
		{"dlv_version", "github.com/go-delve/delve/cmd/dlv"},
	} {
		m := regexp.MustCompile(`(?m)^` + tt.variable + `=(\S+)$`).FindSubmatch(setup)
		if m == nil {
			t.Fatalf("go/setup sets no %s", tt.variable)
		}
		if want := tt.module + "@" + string(m[1]); !strings.Contains(string(dockerfile), want) {
			t.Errorf("go/Dockerfile does not install %s (the version in go/setup)", want)
		}
	}
}

// TestNodeDockerfileVersions keeps the npm packages of the node Dockerfile
// equal to npm-packages, which images/node/setup and tests/run install.
func TestNodeDockerfileVersions(t *testing.T) {
	pins, err := os.ReadFile(filepath.Join("node", "npm-packages"))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join("node", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := ParsePackages(pins)
	if len(pkgs) == 0 {
		t.Fatal("node/npm-packages lists nothing")
	}
	for _, p := range pkgs {
		if !regexp.MustCompile(`^(@[\w.-]+/)?[\w.-]+@\d+\.\d+\.\d+$`).MatchString(p) {
			t.Errorf("node/npm-packages: %q is not an exact name@version", p)
		}
		if !strings.Contains(string(dockerfile), p) {
			t.Errorf("node/Dockerfile does not install %s (the version in node/npm-packages)", p)
		}
	}
}

// aptInstalls returns the packages named by every `apt-get install` in a Dockerfile.
func aptInstalls(dockerfile string) []string {
	joined := strings.ReplaceAll(dockerfile, "\\\n", " ")
	var pkgs []string
	for _, line := range strings.Split(joined, "\n") {
		for _, command := range regexp.MustCompile(`&&|;|\|\|`).Split(line, -1) {
			fields := strings.Fields(command)
			i := slices.Index(fields, "apt-get")
			if i < 0 || i+1 >= len(fields) {
				continue
			}
			rest := fields[i+1:]
			j := slices.Index(rest, "install")
			if j < 0 {
				continue
			}
			for _, f := range rest[j+1:] {
				if !strings.HasPrefix(f, "-") {
					pkgs = append(pkgs, f)
				}
			}
		}
	}
	return pkgs
}

func duplicates(list []string) []string {
	seen := map[string]bool{}
	var dup []string
	for _, s := range list {
		if seen[s] && !slices.Contains(dup, s) {
			dup = append(dup, s)
		}
		seen[s] = true
	}
	return dup
}

func TestAptInstalls(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"continued", "RUN apt-get update \\\n && apt-get install -y --no-install-recommends \\\n  a \\\n  b \\\n && rm -rf x\n", []string{"a", "b"}},
		{"env prefix", "RUN DEBIAN_FRONTEND=noninteractive apt-get install -y c\n", []string{"c"}},
		{"no install", "RUN apt-get update\n", nil},
		{"two runs", "RUN apt-get install -y a\nRUN apt-get -q install b\n", []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := aptInstalls(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("aptInstalls = %q, want %q", got, tt.want)
			}
		})
	}
}
