package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Scope is what a token may do. Scopes are ordered: admin implies write,
// and write implies read.
type Scope string

// The scopes.
const (
	// ScopeRead allows the GET routes (jobs, tasks, results, metrics).
	ScopeRead Scope = "read"
	// ScopeWrite allows submitting, cancelling, redriving and deleting
	// jobs, and reading.
	ScopeWrite Scope = "write"
	// ScopeAdmin allows everything, including replaying and purging dead
	// letters.
	ScopeAdmin Scope = "admin"
)

// rank orders the scopes; 0 is not a scope.
func (s Scope) rank() int {
	switch s {
	case ScopeRead:
		return 1
	case ScopeWrite:
		return 2
	case ScopeAdmin:
		return 3
	}
	return 0
}

// Token is a bearer token the API accepts and the scopes it grants.
type Token struct {
	// Value is the secret the client sends as "Authorization: Bearer
	// <Value>". It must not be empty, nor contain white space or commas.
	Value string
	// Scopes are what the token may do; at least one.
	Scopes []Scope
}

// validate says what is wrong with t, without repeating its secret.
func (t Token) validate() error {
	if t.Value == "" {
		return errors.New("empty token value")
	}
	if strings.ContainsAny(t.Value, " \t\r\n,") {
		return errors.New("the token value contains white space or a comma")
	}
	if len(t.Scopes) == 0 {
		return errors.New("the token has no scope")
	}
	for _, s := range t.Scopes {
		if s.rank() == 0 {
			return fmt.Errorf("unknown scope %q (want read, write or admin)", s)
		}
	}
	return nil
}

// ParseTokens parses the WARREN_API_TOKENS format: comma-separated entries
// "token:scope[+scope...]", for example "abc123:read,def456:write,root:admin".
// White space around entries is ignored, and an empty string means no
// tokens. Errors name the entry by position and never include a token's
// value.
func ParseTokens(s string) ([]Token, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var tokens []Token
	seen := map[string]bool{}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		value, scopes, ok := cutLast(entry, ":")
		if !ok {
			return nil, fmt.Errorf("api tokens: entry %d: want token:scope[+scope...]", i+1)
		}
		tok := Token{Value: value}
		for _, sc := range strings.Split(scopes, "+") {
			tok.Scopes = append(tok.Scopes, Scope(strings.TrimSpace(sc)))
		}
		if err := tok.validate(); err != nil {
			return nil, fmt.Errorf("api tokens: entry %d: %w", i+1, err)
		}
		if seen[value] {
			return nil, fmt.Errorf("api tokens: entry %d: the same token is listed twice", i+1)
		}
		seen[value] = true
		tokens = append(tokens, tok)
	}
	return tokens, nil
}

// cutLast is strings.Cut at the last sep, so a token may contain ':'.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// authenticator checks bearer tokens. It keeps only the tokens' SHA-256
// digests, so every comparison is of equal length and in constant time.
type authenticator struct {
	digests [][sha256.Size]byte
	ranks   []int
}

func newAuthenticator(tokens []Token) *authenticator {
	a := &authenticator{}
	for _, t := range tokens {
		rank := 0
		for _, s := range t.Scopes {
			rank = max(rank, s.rank())
		}
		a.digests = append(a.digests, sha256.Sum256([]byte(t.Value)))
		a.ranks = append(a.ranks, rank)
	}
	return a
}

// enabled reports whether any token is configured.
func (a *authenticator) enabled() bool { return len(a.digests) > 0 }

// rank returns the scope rank of the token presented, or 0 when it is not
// one of the configured tokens. It compares against every token, whichever
// matches, so its timing says nothing about which did.
func (a *authenticator) rank(presented string) int {
	d := sha256.Sum256([]byte(presented))
	rank := 0
	for i := range a.digests {
		if subtle.ConstantTimeCompare(d[:], a.digests[i][:]) == 1 {
			rank = a.ranks[i]
		}
	}
	return rank
}

// authorize wraps h so that, when tokens are configured, it only runs for a
// request whose bearer token grants scope. A public route (scope "") is
// never checked.
func (s *server) authorize(scope Scope, h http.Handler) http.Handler {
	if scope == "" || !s.auth.enabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		presented, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="warren"`)
			writeError(w, errorf(http.StatusUnauthorized, codeUnauthorized, "missing bearer token: send Authorization: Bearer <token>"))
			return
		}
		rank := s.auth.rank(presented)
		if rank == 0 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="warren", error="invalid_token"`)
			writeError(w, errorf(http.StatusUnauthorized, codeUnauthorized, "unknown bearer token"))
			return
		}
		if rank < scope.rank() {
			writeError(w, errorf(http.StatusForbidden, codeForbidden, "this token lacks the %q scope", scope))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header (the scheme is case-insensitive).
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authInfoJSON is the body of GET /v1/auth.
type authInfoJSON struct {
	AuthRequired bool    `json:"auth_required"`
	Scopes       []Scope `json:"scopes"`
}

// impliedScopes lists the scopes a rank grants, lowest first: admin
// implies write, and write read.
func impliedScopes(rank int) []Scope {
	scopes := []Scope{}
	for _, s := range []Scope{ScopeRead, ScopeWrite, ScopeAdmin} {
		if s.rank() <= rank {
			scopes = append(scopes, s)
		}
	}
	return scopes
}

// authInfo handles GET /v1/auth, a public route: whether the API wants a
// token and what the token sent (if any) may do, so that a client (the
// dashboard) can ask for a token and offer only the actions it allows.
// Without configured tokens every scope is granted; with tokens, a request
// without one gets no scope, and one with an unknown token a 401.
func (s *server) authInfo(w http.ResponseWriter, r *http.Request) {
	if !s.auth.enabled() {
		writeJSON(w, http.StatusOK, authInfoJSON{Scopes: impliedScopes(ScopeAdmin.rank())})
		return
	}
	presented, ok := bearerToken(r)
	if !ok {
		writeJSON(w, http.StatusOK, authInfoJSON{AuthRequired: true, Scopes: []Scope{}})
		return
	}
	rank := s.auth.rank(presented)
	if rank == 0 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="warren", error="invalid_token"`)
		writeError(w, errorf(http.StatusUnauthorized, codeUnauthorized, "unknown bearer token"))
		return
	}
	writeJSON(w, http.StatusOK, authInfoJSON{AuthRequired: true, Scopes: impliedScopes(rank)})
}
