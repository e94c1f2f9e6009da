// Command berth is the sandbox controller's command line: serve the HTTP
// API, call one tool, list the tools, print the version.
//
//	berth serve [--addr 127.0.0.1:7450] [--token-file F]
//	berth mcp [--sandbox REF] [--workspace DIR] [--conversation ID] [--surface S] [--client-is-operator]
//	berth call [--workspace DIR] [--sandbox REF] [--conversation ID] [--surface S] [--json] TOOL 'ARGS_JSON'
//	berth tools [--surface S] [--json]
//	berth version
//
// It is the only package that picks sandbox backends: the host and, when
// its engine answers, Docker.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/syntax"
	"berth.dev/berth/tools/lsp"
)

// version and revision are set by a release build (release/build:
// -ldflags "-X main.version=v1.2.3 -X main.revision=COMMIT"), whose tree
// has no VCS information; otherwise the module's build info is used.
var version, revision = "", ""

// exitError carries an exit code and a message already printed (or to
// print) on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	os.Exit(report(os.Stderr, err))
}

// report prints err to w and returns the exit code.
func report(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(w, ee.msg)
		}
		return ee.code
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "berth: ") {
		msg = "berth: " + msg
	}
	fmt.Fprintln(w, msg)
	return 1
}

// globalFlags are the placement settings shared by every command.
type globalFlags struct {
	labelKey       string
	noHostFallback bool
	dockerHost     string
	verbose        bool
	// logFormat and logLevel: --log-format (text or json) and
	// --log-level (debug, info, warn, error; empty: the command's default).
	logFormat, logLevel string
	// serveMode is berth serve's --permissions: hosted (the default) or local.
	serveMode string

	// Kubernetes and containerd placement; see kubeModes.
	kube              string
	kubeNamespaces    []string
	containerdAddress string
	containerdFIFODir string
	nodeName          string

	// Trust settings (docs/security.md).
	// hostPlacement is off, explicit or fallback; empty picks the
	// default of the command's mode (see hostPlacementDefault).
	hostPlacement string
	// hostRoots are the directories host workspaces must lie under.
	hostRoots []string
	// allowUnlabelled lets an explicit container reference name a
	// container that is not labelled with the run's conversation.
	allowUnlabelled bool
	// hostUser is the unprivileged user host processes run as.
	hostUser string
	// hostEnv names extra environment variables (NAME or NAME=VALUE)
	// that host processes get on top of the minimal environment.
	hostEnv []string
	// hostPidsMax and hostMemoryMax bound each host sandbox
	// (host.Options.PidsMax, MemoryMax).
	hostPidsMax   int
	hostMemoryMax string

	// lspRequestTimeout bounds each request to a language server
	// (controller.Config.LSPRequestTimeout).
	lspRequestTimeout time.Duration
}

// A command annotated grammarsAnnotation: grammarsOnDemand loads the
// configured grammars itself, when it needs them.
const (
	grammarsAnnotation = "berth.grammars"
	grammarsOnDemand   = "on-demand"
)

// loadConfiguredGrammars loads the grammars added by config, warning on w
// about those that fail.
func loadConfiguredGrammars(w io.Writer) {
	if _, err := syntax.LoadConfigured(); err != nil {
		fmt.Fprintf(w, "berth: warning: some grammars were not loaded: %v\n", err)
	}
}

func newRoot() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "berth",
		Short: "berth places an agent's server-bound tools in the conversation's sandbox",
		Long: `berth is a container-native sandbox controller: it runs the built-in tools of an
agent run (files, structural search and rewrite, a debugger, …) inside the
conversation's existing container, or on the host when there is none.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Grammars added by config (BERTH_GRAMMARS, or the built Dart and Swift
		// grammars in the grammar directory) are loaded before any command
		// but those that load them on demand (ast-grep, ast-edit); a broken
		// one is a warning, the bundled languages still work.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := g.checkLog(); err != nil {
				return err
			}
			if cmd.Annotations[grammarsAnnotation] != grammarsOnDemand {
				loadConfiguredGrammars(cmd.ErrOrStderr())
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.labelKey, "label-key", "berth.conversation", "container label whose value is the conversation id")
	pf.BoolVar(&g.noHostFallback, "no-host-fallback", false, "fail instead of running on the host when a conversation has no container")
	pf.StringVar(&g.dockerHost, "docker-host", "", "Docker engine address (default: $DOCKER_HOST or the local socket)")
	pf.BoolVarP(&g.verbose, "verbose", "v", false, "log placement and lifecycle details to stderr (--log-level debug)")
	pf.StringVar(&g.logFormat, "log-format", "text", "format of berth's log on stderr: text or json (one JSON object a line, berth's own lines among them)")
	pf.StringVar(&g.logLevel, "log-level", "", "least level logged: debug, info, warn or error (default: info for serve, which logs each tool call and permission decision; warn for the other commands)")
	pf.StringVar(&g.kube, "kube", kubeAuto, "how berth reaches Kubernetes pods (kube://NAMESPACE/POD[/CONTAINER]): "+
		"api (pod exec through the API server), node (as a node agent, through this node's containerd; only this node's pods), "+
		"off, or auto (api when berth runs in a cluster or $KUBECONFIG is set)")
	pf.StringSliceVar(&g.kubeNamespaces, "kube-namespaces", nil, "namespaces in which API mode looks for a conversation's pod (default: all; needs a list permission in each)")
	pf.StringVar(&g.containerdAddress, "containerd-address", "", "containerd socket (default: $CONTAINERD_ADDRESS, else /run/containerd/containerd.sock, else dockerd's)")
	pf.StringVar(&g.containerdFIFODir, "containerd-fifo-dir", "", "directory for containerd exec FIFOs; containerd must see it at the same path (default: containerd's /run/containerd/fifo)")
	pf.StringVar(&g.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name, for messages in node mode (default: $NODE_NAME)")
	pf.StringVar(&g.hostPlacement, "host-placement", "", "whether runs may be placed on the host: off, explicit (only \"sandbox\":\"host\"), or fallback (also when auto finds no container); default: fallback for call and serve --permissions local, off for serve --permissions hosted unless --host-user is set, then explicit")
	pf.StringSliceVar(&g.hostRoots, "host-root", nil, "directory under which host workspaces must lie (repeatable; default: anywhere for call and serve --permissions local, nowhere for serve --permissions hosted)")
	pf.BoolVar(&g.allowUnlabelled, "allow-unlabelled", false, "let an explicit docker://, containerd:// or kube:// reference name a container not labelled with the run's conversation")
	pf.StringVar(&g.hostUser, "host-user", "", "unprivileged user (name or uid) host processes run as; berth must run as root to use it")
	pf.IntVar(&g.hostPidsMax, "host-pids-max", 0, fmt.Sprintf("most processes of one host run (cgroup pids.max; without a cgroup, RLIMIT_NPROC of the --host-user); default %d, negative: no limit", host.DefaultPidsMax))
	pf.StringVar(&g.hostMemoryMax, "host-memory-max", "", fmt.Sprintf("most memory of one host run's processes (cgroup only), bytes or with K, M, G; default %dG, -1: no limit", host.DefaultMemoryMax>>30))
	pf.StringSliceVar(&g.hostEnv, "host-env", nil, "environment variable (NAME, taken from berth's environment, or NAME=VALUE) host processes get beyond PATH, HOME and LANG (repeatable)")
	pf.DurationVar(&g.lspRequestTimeout, "lsp-request-timeout", lsp.DefaultRequestTimeout, "longest wait for a language server's answer to one request; a server that does not answer in time makes the call fail, naming the server and saying to call lsp reload")
	root.AddCommand(newServe(g), newMCP(g), newCall(g), newTools(g), newASTGrep(), newASTEdit(), newGrammars(), newVersion())
	return root
}

func (g *globalFlags) logger(w io.Writer) *slog.Logger {
	return g.loggerAt(w, slog.LevelWarn)
}

// loggerAt is the logger of a command whose default level is def.
// checkLog has validated the flags.
func (g *globalFlags) loggerAt(w io.Writer, def slog.Level) *slog.Logger {
	level := def
	if g.logLevel != "" {
		level.UnmarshalText([]byte(g.logLevel))
	}
	if g.verbose {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	if g.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// checkLog validates --log-format and --log-level.
func (g *globalFlags) checkLog() error {
	if g.logFormat != "text" && g.logFormat != "json" {
		return fmt.Errorf("berth: --log-format %q: use text or json", g.logFormat)
	}
	var l slog.Level
	if g.logLevel != "" && (l.UnmarshalText([]byte(g.logLevel)) != nil || !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(g.logLevel))) {
		return fmt.Errorf("berth: --log-level %q: use debug, info, warn or error", g.logLevel)
	}
	return nil
}

// jsonLines is stderr for a command logging JSON: each line berth writes
// itself ("berth: serving on …") becomes one record of log at info level,
// so the whole stream stays one JSON object a line.
type jsonLines struct {
	log  *slog.Logger
	mu   sync.Mutex
	part []byte
}

func (j *jsonLines) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.part = append(j.part, p...)
	for {
		i := bytes.IndexByte(j.part, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(j.part[:i])); line != "" {
			j.log.Info(line)
		}
		j.part = j.part[i+1:]
	}
	return len(p), nil
}

// stderrFor is the stream a command writes its own lines to: w itself,
// or, logging JSON, w through log.
func (g *globalFlags) stderrFor(w io.Writer, log *slog.Logger) io.Writer {
	if g.logFormat == "json" {
		return &jsonLines{log: log}
	}
	return w
}
