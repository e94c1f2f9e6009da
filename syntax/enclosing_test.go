package syntax

import (
	"context"
	"reflect"
	"testing"
)

// TestEnclosing: each match of the pattern is named by the declarations
// around it, in every language with a declaration table; a match that is
// a declaration is named by what encloses it, not by itself.
func TestEnclosing(t *testing.T) {
	for _, c := range []struct {
		name, lang, pattern, src string
		want                     []string // one per match, in order
	}{
		{"go functions, methods, closures and types", "go", "mark($$$)", `package p

type Server struct{ f func() int }

func (s *Server) Serve() { mark(1); go func() { mark(2) }() }
func (s Server) Name() string { return mark(3) }
func (l *List[T]) Push(v T) { mark(4) }
func top() { mark(5) }
var v = mark(6)
type T struct { x [mark(7)]int }
`, []string{"(*Server).Serve", "(*Server).Serve", "Server.Name", "(*List).Push", "top", "", "T"}},
		{"python classes and nested functions", "python", "mark($$$)", `class HTTPConnection:
    def putheader(self, h):
        mark(1)
        def inner():
            mark(2)
    @property
    def port(self):
        return mark(3)

mark(4)

async def f():
    mark(5)
`, []string{"HTTPConnection.putheader", "HTTPConnection.putheader.inner", "HTTPConnection.port", "", "f"}},
		{"python: a definition is named by its class", "python", "def $F($$$): $$$", `class A:
    def m(self):
        pass

def top():
    def inner(): pass
`, []string{"A", "", "top"}},
		{"javascript classes, methods and function values", "javascript", "mark($$$)", `class A {
  m() { mark(1) }
  #p() { mark(2) }
  h = () => mark(3)
}
function F() { mark(4) }
const g = (x) => { mark(5) }, k = function () { mark(6) };
const n = mark(7);
`, []string{"A.m", "A.#p", "A.h", "F", "g", "k", ""}},
		{"typescript interfaces, namespaces, generics", "typescript", "mark($$$)", `class Box<T> { get(): T { return mark(1) } }
namespace N { export function f() { mark(2) } }
abstract class B { run() { mark(3) } }
`, []string{"Box.get", "N.f", "B.run"}},
		{"rust impls, traits and modules", "rust", "mark($$$)", `mod m {
    fn f() { mark(1); }
}
impl<T> Foo<T> { fn a(&self) { mark(2); } }
impl fmt::Display for a::Bar<u8> { fn fmt(&self) { mark(3); } }
trait Tr { fn t(&self) { mark(4); } }
fn main() { let c = || mark(5); }
`, []string{"m.f", "Foo.a", "a::Bar.fmt", "Tr.t", "main"}},
		{"c functions and structs", "c", "mark($$$)", `int main(void) { mark(1); }
static char *g(int x) { return mark(2); }
struct S { int a[mark(3)]; };
`, []string{"main", "g", "S"}},
		{"cpp namespaces, classes, qualified definitions", "cpp", "mark($$$)", `namespace ns { class C { public: void m() { mark(1); } }; }
void C::out() { mark(2); }
C::~C() { mark(3); }
template <typename T> T tf(T a) { return mark(4); }
`, []string{"ns.C.m", "C::out", "C::~C", "tf"}},
		{"java classes, methods and constructors", "java", "mark($$$)", `class A {
  void m() { mark(1); }
  A() { mark(2); }
  class In { int g() { return mark(3); } }
}
enum E { X; void e() { mark(4); } }
`, []string{"A.m", "A.A", "A.In.g", "E.e"}},
		{"ruby modules, classes and methods", "ruby", "mark($$$)", `module M
  class C
    def m
      mark(1)
    end
    def self.s
      mark(2)
    end
  end
end
`, []string{"M.C.m", "M.C.s"}},
		{"a language without a table has no enclosing name", "lua", "mark($$$)", "function f()\n  mark(1)\nend\n", []string{""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := mustLang(t, c.lang)
			p, err := Compile(l, c.pattern)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := Parse(context.Background(), l, []byte(c.src))
			if err != nil {
				t.Fatal(err)
			}
			ms, err := p.Match(context.Background(), tr)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range ms {
				got = append(got, tr.Enclosing(m.StartByte, m.EndByte))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("enclosing %q, want %q", got, c.want)
			}
		})
	}
}

// TestEnclosingOutOfRange: a range that does not fit the source has no
// enclosing name (and does not panic).
func TestEnclosingOutOfRange(t *testing.T) {
	tr, err := Parse(context.Background(), mustLang(t, "go"), []byte("package p\nfunc f() {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{-1, 2}, {5, 3}, {0, 1000}, {0, 0}, {0, 9}} {
		if got := tr.Enclosing(r[0], r[1]); got != "" {
			t.Errorf("Enclosing(%d, %d) = %q, want \"\"", r[0], r[1], got)
		}
	}
}
