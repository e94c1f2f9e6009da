package mcpserver

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
)

// Cards as multi round-trip requests (SEP-2322). A stateless client
// (StatelessVersion) that declared elicitation in the request's _meta
// cannot be sent elicitation/create while berth serves its call. Instead
// the call runs until the card it draws opens (ask_user's question; a
// permission card with [Options.ClientIsOperator]); then berth cancels
// the call — the card is drawn before the tool does anything — and
// answers an InputRequiredResult: the card as an elicitation form under
// the key [InputCard], and a requestState. The client asks its user and
// calls again with the same arguments, the form's answer in
// inputResponses and the requestState echoed; berth runs the call again
// and answers the same card (same kind, question and options, or tool and
// call) with it as it opens.
//
// The requestState is sealed (AES-GCM, a key only this berth process
// holds) and binds the tenant, the principal (the credential), the run,
// the tool, a digest of the arguments, a digest of the card and an expiry
// (RequestStateTTL); berth takes it once: a replay, a state of another
// principal, run, tool or arguments, an altered one or an expired one is
// refused with invalid params, and the client calls again without it.
// The key and the set of states taken live in this process: a retry that
// lands on another berth replica, or after a restart, is refused the same
// way, and its new call draws the card anew.

// InputCard is the key of a card's elicitation in an InputRequiredResult's
// inputRequests, and of its answer in the retry's inputResponses.
const InputCard = "card"

// RequestStateTTL is how long a requestState may be answered.
const RequestStateTTL = 10 * time.Minute

// roundState is what a requestState seals.
type roundState struct {
	Tenant    string `json:"t"`
	Principal string `json:"p"`
	Run       string `json:"r"`
	Tool      string `json:"o"`
	Args      string `json:"a"` // argsDigest
	Card      string `json:"c"` // cardDigest
	Nonce     string `json:"n"`
	Expiry    int64  `json:"e"` // Unix milliseconds
}

// states seals requestStates and remembers those taken.
var states = newSealer()

type sealer struct {
	aead cipher.AEAD

	mu    sync.Mutex
	taken map[string]time.Time // nonce → expiry
}

func newSealer() *sealer {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(fmt.Sprintf("mcpserver: no randomness for the requestState key: %v", err))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &sealer{aead: aead, taken: map[string]time.Time{}}
}

func (s *sealer) seal(st roundState) string {
	plain, _ := json.Marshal(st)
	nonce := make([]byte, s.aead.NonceSize())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, nil))
}

// take opens sealed, checks it against want (every field but Nonce and
// Expiry) and the clock, and takes it: a state is taken once.
func (s *sealer) take(sealed string, want roundState, now time.Time) (roundState, error) {
	b, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize() {
		return roundState{}, errors.New("it is not a requestState berth made")
	}
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], nil)
	if err != nil {
		return roundState{}, errors.New("it was not sealed by this berth (altered, or made by another replica or before a restart)")
	}
	var st roundState
	if err := json.Unmarshal(plain, &st); err != nil {
		return roundState{}, errors.New("it is not a requestState berth made")
	}
	switch {
	case st.Tenant != want.Tenant || st.Principal != want.Principal:
		return roundState{}, errors.New("it was given to another credential")
	case st.Run != want.Run:
		return roundState{}, errors.New("it was given for another run")
	case st.Tool != want.Tool || st.Args != want.Args:
		return roundState{}, errors.New("it was given for another call (another tool or other arguments)")
	case now.UnixMilli() > st.Expiry:
		return roundState{}, fmt.Errorf("it expired (%s after it was given)", RequestStateTTL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, exp := range s.taken {
		if now.After(exp) {
			delete(s.taken, n)
		}
	}
	if _, ok := s.taken[st.Nonce]; ok {
		return roundState{}, errors.New("it was answered already")
	}
	s.taken[st.Nonce] = time.UnixMilli(st.Expiry)
	return st, nil
}

// argsDigest digests a call's arguments as JSON values, so that the same
// arguments encoded again (another key order, other spacing) match.
func argsDigest(args json.RawMessage) string {
	var v any
	if json.Unmarshal(args, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			args = b
		}
	}
	sum := sha256.Sum256(args)
	return hex.EncodeToString(sum[:])
}

// cardDigest digests what a card asks, not which card it is: the card the
// retried call draws is a new one asking the same.
func cardDigest(c questions.Card) string {
	b, _ := json.Marshal(struct {
		Kind                          questions.Kind
		Question, Context             string
		Options                       []questions.Option
		AllowFreeText, MultiSelect    bool
		Tool, Level, Surface, Summary string
		Detail                        string
	}{c.Kind, c.Question, c.Context, c.Options, c.AllowFreeText, c.MultiSelect, c.Tool, c.Level, c.Surface, c.Summary, c.Detail})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// roundTrips reports whether a call of ss's client meets its cards as
// multi round-trip requests: a stateless request that declared
// elicitation.
func roundTrips(ss *mcp.ServerSession) bool {
	if !stateless(ss) {
		return false
	}
	ip := ss.InitializeParams()
	return ip.Capabilities != nil && ip.Capabilities.Elicitation != nil
}

// callRoundTrip runs a call of a stateless client that elicits: with the
// answer its requestState carries for the card the call draws, or, when
// it carries none, until that card opens, answered then with an
// InputRequiredResult.
func (h *handler) callRoundTrip(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage) (*mcp.CallToolResult, error) {
	p := req.Params
	port := h.run.Questions()
	want := roundState{Tenant: h.opts.Tenant, Principal: h.opts.Principal, Run: h.run.ID(), Tool: p.Name, Args: argsDigest(args)}
	var given *mcp.ElicitResult
	var st roundState
	if p.RequestState != "" {
		var err error
		if st, err = states.take(p.RequestState, want, time.Now()); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
				"mcp: %s: the requestState is refused: %v; call %s again without requestState and inputResponses, and answer the card it asks anew", p.Name, err, p.Name)}
		}
		r, ok := p.InputResponses[InputCard].(*mcp.ElicitResult)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
				"mcp: %s: inputResponses has no elicitation result under %q, the key of the card asked; call %s again without requestState to be asked anew", p.Name, InputCard, p.Name)}
		}
		given = r
	}
	if port == nil {
		res, err := h.run.Call(ctx, h.opts.Surface, p.Name, args)
		return h.finish(p.Name, res, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if rel, ok := cancelOf(req); ok {
		defer rel.track(cancel)()
	}
	mine := h.mine(p.Name, args)
	sub := port.Subscribe(^uint64(0)) // only what opens from now on
	var need *questions.Card          // set by the follower before it cancels the call
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			evs, err := sub.Next(ctx)
			if err != nil {
				return
			}
			for _, e := range evs {
				var c questions.Card
				if e.Type != questions.EventCardOpened || json.Unmarshal(e.Data, &c) != nil || !mine(c) {
					continue
				}
				if given != nil && cardDigest(c) == st.Card {
					a, err := AnswerOf(c, given)
					if err == nil {
						a.By = h.answerer("a request round trip")
						err = port.Answer(c.N, a, h.rights())
					}
					given = nil // taken once
					if err != nil && !errors.Is(err, questions.ErrNoCard) {
						h.opts.Logger.Warn("mcp: the client's answer to a card was refused", "run", h.run.ID(), "card", c.N, "err", err)
					}
					continue
				}
				need = &c
				cancel()
				return
			}
		}
	}()
	res, err := h.run.Call(ctx, h.opts.Surface, p.Name, args)
	cancel()
	wg.Wait()
	sub.Close()
	if need != nil {
		return h.inputRequired(*need, want)
	}
	return h.finish(p.Name, res, err)
}

// rights are those of the client's answers to cards.
// answerer names, for the audit trail, the MCP client that answers a card
// through via ("over stdio", "session ID", or a 2026-07-28 request round
// trip), and its credential when it came over HTTP.
func (h *handler) answerer(via string) string {
	who := "the MCP client (" + via + ")"
	if p := h.opts.Principal; len(p) >= 12 {
		who += ", token sha256:" + p[:12] + "…"
	}
	if h.opts.ClientIsOperator {
		who += "; its user is the operator"
	}
	return who
}

func (h *handler) rights() questions.Rights {
	if h.opts.ClientIsOperator {
		return questions.Operator
	}
	return questions.MayAnswerQuestions
}

// inputRequired is the InputRequiredResult asking card c.
func (h *handler) inputRequired(c questions.Card, st roundState) (*mcp.CallToolResult, error) {
	params, err := ElicitParams(c)
	if err != nil {
		return nil, h.callError(st.Tool, err)
	}
	nonce := make([]byte, 16)
	rand.Read(nonce)
	st.Card, st.Nonce = cardDigest(c), hex.EncodeToString(nonce)
	st.Expiry = time.Now().Add(RequestStateTTL).UnixMilli()
	res := &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{InputCard: params}, RequestState: states.seal(st)}
	return withResultType(res, "input_required"), nil
}

// finish maps a run call's outcome to MCP's: a result, an input error as
// an isError result, or a call error.
func (h *handler) finish(tool string, res *tools.Result, err error) (*mcp.CallToolResult, error) {
	if err != nil {
		if r := h.inputErrorResult(tool, err); r != nil {
			return r, nil
		}
		return nil, h.callError(tool, err)
	}
	return Result(res), nil
}
